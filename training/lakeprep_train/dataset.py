"""Stream one rank's rows of one split from Parquet shards into batched tensors.

The rows of a rank are planned at read time, for the world size the job has (torchrun's
WORLD_SIZE), not baked into the export: one export trains on 1, 2, 3 or 4 GPUs alike.
:func:`plan_rank` computes the plan from the manifest alone (the shards' row counts,
the split's ``remainder``), the seed and the epoch, so every rank computes the same
global order without talking to the others:

1. the split's shards, in manifest order or (shuffled) permuted by ``(seed, epoch)``,
   are concatenated into one sequence of ``N`` rows;
2. ``remainder: "drop"`` keeps the first ``W * (N // W)`` of them (the dropped tail
   changes with the epoch's order); ``"pad"`` extends the sequence to
   ``W * ceil(N / W)`` by repeating its first rows;
3. rank ``r`` takes the contiguous chunk ``[r * rows_per_rank, (r + 1) * rows_per_rank)``
   and reads only the row groups of the shards it overlaps, sliced to the chunk.
   Shuffled, it reads each shard's row groups in an order drawn from
   ``(seed, epoch, rank)``, and a bounded shuffle buffer mixes their rows: row groups are
   held until they have ``shuffle_rows`` rows or more (:data:`SHUFFLE_BUFFER_ROWS`), their
   rows permuted together, and batches cut from the mixed rows (the last buffer may be
   smaller). A row group of a prepared day holds one class, so without the buffer every
   batch would be of one class.

So every rank yields exactly ``steps_per_rank = ceil(rows_per_rank / batch_size)``
batches per epoch (only the last may be short), and every row is read exactly once per
epoch apart from the dropped or padded remainder (fewer than ``W`` rows). Equal steps
matter because DDP's gradient all-reduce is a collective: a rank with one step fewer
leaves the others waiting forever. The reader holds each rank to the plan and fails
loudly, naming the shard, rather than yielding a different number of steps. Contiguous
chunks (rather than rows ``r, r + W, ...``) keep each rank's reads to about ``1 / W``
of the files; the exporter makes the shard count a multiple of 12 where it can, so
that 1, 2, 3, 4 and 6 ranks read whole shards (docs/MANIFEST.md).

Shards are read row group by row group with pyarrow, converted to numpy in bulk (no
per-row Python) and cut into batch views without copies. Two background threads keep
the training loop from waiting: one decodes the next row group while the other
converts and checks this one and hands its batches over, a run at a time, to a bounded
queue. The exporter writes row groups of whole batches (docs/MANIFEST.md), several per
shard, so that decoding and converting overlap.
"""

from __future__ import annotations

import collections
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
from torch.utils.data import IterableDataset

from lakeprep_contracts import labels
from lakeprep_contracts.encode import PADDING_ID, encode, input_columns
from lakeprep_contracts.text import SUBWORD
from lakeprep_train import storage
from lakeprep_train.augment import Augmentation
from lakeprep_train.manifest import (
    column_problems,
    expected_columns,
    rows_per_rank_for,
    transform_for_features,
)

if TYPE_CHECKING:
    from lakeprep_train.manifest import Manifest, Shard, Split

_Block = dict[str, np.ndarray]  # one chunk of rows: tensor name -> numpy array
_T = TypeVar("_T")

# The batch tensors' dtypes, the model's input contract (predict.feature_tensors and the
# preflight's memory estimate use them too). Ids stay int32 as the shards hold them:
# nn.Embedding and nn.EmbeddingBag take int32 indices on CPU and CUDA, and int64 would
# double the bytes each batch is written, pinned and copied to the device with. The label
# is int64, the class-index target cross-entropy takes; a continuous label's is its value,
# float32 (the trainer standardises it with the transform's label.target).
NUMERIC_DTYPE = np.float32
ID_DTYPE = np.int32
LABEL_DTYPE = np.int64
TARGET_DTYPE = np.float32

# Rows a shuffled read mixes at a time (RankBatches' shuffle_rows). A day's prepared files
# hold one split and one class each, in row groups of 16,384 rows, and a window's manifest
# lists them as entries of about a row group (lakeprep_jobs.day_shards): a row group's
# batches alone would be of one class and day. 65,536 rows are four such row groups, so a
# buffer mixes four entries of the permuted entry order (classes, days), while it holds a
# bounded amount: the buffer and its mixed copy, twice 65,536 rows (at 1 KiB a row,
# 128 MiB), never a rank's whole chunk.
SHUFFLE_BUFFER_ROWS = 65_536


@dataclass
class Batch:
    """One step's rows, as the model takes them."""

    numeric: torch.Tensor  # NUMERIC_DTYPE (float32) [B, n_numeric]
    categorical: torch.Tensor  # ID_DTYPE (int32) [B, n_categorical]
    text: torch.Tensor  # ID_DTYPE (int32) [B, n_text, L], 0 = padding
    # LABEL_DTYPE (int64) [B], index into manifest label.classes; for a continuous label,
    # TARGET_DTYPE (float32) [B], its value (the prepared rows' `target`)
    label: torch.Tensor
    ids: np.ndarray | None = None  # object [B] of row ids, when asked for

    def __len__(self) -> int:
        return self.label.shape[0]  # torch.Size holds ints: no tensor op, no int()

    @property
    def attention_mask(self) -> torch.Tensor:
        """1 where ``text`` holds a token, 0 at padding (uint8, ``text``'s shape).

        The same mask as ``lakeprep_contracts.encode.attention_mask``: every encoding pads
        with id 0, which no token has. The reference model's ``EmbeddingBag(padding_idx=0)``
        takes the mean over exactly these positions (mean pooling under the mask).
        """
        return (self.text != PADDING_ID).to(torch.uint8)

    def to(self, device: torch.device, non_blocking: bool = False) -> Batch:
        return Batch(
            numeric=self.numeric.to(device, non_blocking=non_blocking),
            categorical=self.categorical.to(device, non_blocking=non_blocking),
            text=self.text.to(device, non_blocking=non_blocking),
            label=self.label.to(device, non_blocking=non_blocking),
            ids=self.ids,
        )

    def pin_memory(self) -> Batch:
        """Page-locked copies, so ``to(cuda, non_blocking=True)`` overlaps with compute."""
        pinned = {f.name: getattr(self, f.name).pin_memory() for f in fields(self) if f.name != "ids"}
        return Batch(**pinned, ids=self.ids)


class FeatureLayout:
    """Which shard columns go into which tensor, in the manifest's feature order.

    Shards of ``shard_columns: "prepared"`` hold the day's prepared rows: the layout
    reads the transform's input columns and encodes each row group with
    ``lakeprep_contracts.encode.encode`` (the one implementation of the transform), so
    the tensors are the same bits an encoded shard of those rows gives. The manifest
    must carry its checked transform document (``manifest.with_transform_document``).
    """

    def __init__(self, manifest: Manifest) -> None:
        self.location = manifest.location
        self.read_dictionary: list[str] = []  # prepared string columns, read as dictionary arrays
        # A continuous label's column (`target`), read as the batches' label; None: classes.
        self.target: str | None = None
        # The transform the rows are encoded with as they are read; None: encoded shards.
        self.transform: Mapping[str, Any] | None = None
        # Column -> kind of Arrow type, checked against each file read (prepared shards).
        self.expected: Mapping[str, str] | None = None
        if manifest.shard_columns == "prepared":
            self.expected = expected_columns(manifest)  # raises without the document
            self.transform = transform_for_features(manifest, manifest.transform_document)
            if (fitted := labels.fitted_target(self.transform["label"])) is not None:
                self.target = fitted["column"]
            # Strings are read as Parquet stores them, dictionary-encoded: the transform then
            # encodes each row group's dictionary once, and rows take their entry's id.
            self.read_dictionary = [
                *(s["name"] for s in self.transform["categorical"]),
                *(f"{s['name']}.list.element" for s in self.transform["text"] if s["encoding"] != SUBWORD),
            ]
        self.numeric = manifest.features_with_role("numeric")
        self.categorical = manifest.features_with_role("categorical")
        self.text = manifest.features_with_role("text")
        self.label = manifest.label.name
        self.classes = np.asarray(manifest.label.classes, dtype=np.int64)
        self._class_of = _class_lookup(self.classes)
        self._classes_are_indices = self.classes.tolist() == list(range(len(self.classes)))
        # Text features of different lengths share one tensor: shorter ones are padded
        # with id 0, which the model's EmbeddingBag(padding_idx=0) ignores.
        self.text_length = max((f.length for f in self.text), default=0)

    def columns(self, with_ids: bool) -> list[str]:
        if self.transform is not None:
            names = input_columns(self.transform)
        else:
            names = [f.name for f in (*self.numeric, *self.categorical, *self.text)]
        target = [self.target] if self.target else []
        return [*(["id"] if with_ids else []), self.label, *target, *names]

    def _features(self, table: pa.Table, where: str) -> dict[str, np.ndarray]:
        """Each feature's values as numpy: numerics and categoricals ``[n]``, texts ``[n, length]``."""
        if self.transform is None:
            for name in table.column_names:
                if table.column(name).null_count:
                    raise ValueError(f"{where}: column {name!r} has nulls; the manifest contract has none")
            values = {f.name: table.column(f.name).to_numpy() for f in (*self.numeric, *self.categorical)}
            for f in self.text:
                values[f.name] = _token_matrix(
                    table.column(f.name), table.num_rows, f.length, f"{where}: text {f.name!r}"
                )
            return values
        for name in ("id", self.label, self.target):  # prepared features may be missing (null); these may not
            if name in table.column_names and table.column(name).null_count:
                raise ValueError(f"{where}: column {name!r} has nulls; a prepared shard has none there")
        try:
            return encode(
                {name: table.column(name) for name in input_columns(self.transform)}, self.transform
            )
        except ValueError as err:  # TransformError: a column its role cannot take
            raise ValueError(f"{where}: {err}") from err

    def to_block(self, table: pa.Table, where: str) -> _Block:
        """Convert a row group to numpy, checking what the contract promises.

        Each check is one pass, over the shard's own int32 column (contiguous) before it
        is copied into its matrix, or over the whole numeric matrix at once; only a
        failed check goes back over the columns to name the bad one. Every matrix is
        written once: no zero fill before the copy.
        """
        n = table.num_rows
        values = self._features(table, where)
        numeric = _empty((n, len(self.numeric)), NUMERIC_DTYPE)
        for j, f in enumerate(self.numeric):
            numeric[:, j] = values[f.name]
        # NaN propagates through max and min, +inf is the max and -inf the min: two
        # vectorised reductions (no mask, no overflow) clear the matrix.
        finite = not numeric.size or bool(np.isfinite(numeric.max()) and np.isfinite(numeric.min()))
        if not finite:
            bad = [f.name for j, f in enumerate(self.numeric) if not np.isfinite(numeric[:, j]).all()]
            if bad:
                raise ValueError(f"{where}: numeric column(s) {bad} hold NaN or infinity")
        categorical = _empty((n, len(self.categorical)), ID_DTYPE)
        for j, f in enumerate(self.categorical):
            ids = values[f.name]
            _check_ids(ids, f.cardinality, f"{where}: categorical {f.name!r}", "cardinality")
            categorical[:, j] = ids
        tokens = []
        for f in self.text:
            tokens.append(values[f.name])
            _check_ids(tokens[-1], f.vocab_size, f"{where}: text {f.name!r}", "vocab_size")
        if len(tokens) == 1 and tokens[0].flags.writeable:
            # One text feature: its ids, row after row, already are the [n, 1, L] matrix,
            # in a buffer this row group alone holds. No copy.
            text = tokens[0].reshape(n, 1, self.text_length)
        else:
            text = _empty((n, len(self.text), self.text_length), ID_DTYPE)
            for j, (f, ids) in enumerate(zip(self.text, tokens, strict=True)):
                text[:, j, : f.length] = ids
                text[:, j, f.length :] = 0
        block: _Block = {
            "numeric": numeric,
            "categorical": categorical,
            "text": text,
            "label": self._target(table, where)
            if self.target
            else self._class_index(table.column(self.label).to_numpy(), where),
        }
        if "id" in table.column_names:
            block["ids"] = table.column("id").to_numpy(zero_copy_only=False)
        return block

    def _target(self, table: pa.Table, where: str) -> np.ndarray:
        """A continuous label's values (checked not null above), finite, as TARGET_DTYPE."""
        values = table.column(self.target).to_numpy().astype(TARGET_DTYPE)
        if values.size and not np.isfinite(values).all():
            bad = float(values[~np.isfinite(values)][0])
            raise ValueError(
                f"{where}: column {self.target!r} (the continuous label's value) holds {bad}, or a value "
                "beyond float32; validate quarantines what is not a finite number: rerun the day's stages"
            )
        return values

    def _class_index(self, values: np.ndarray, where: str) -> np.ndarray:
        lookup = self._class_of
        if lookup is not None and values.dtype.kind in "iu":
            if not values.size or int(_unsigned(values).max()) < lookup.size:
                if self._classes_are_indices:  # classes [0, 1, ...]: a value is its index
                    return values.astype(LABEL_DTYPE)
                # One gather through the table; -1 marks a value that is not a class.
                index = lookup[values]
                if not values.size or int(index.min()) >= 0:
                    return index
        values = values.astype(np.int64, copy=False)
        order = np.argsort(self.classes)
        sorted_classes = self.classes[order]
        pos = np.clip(np.searchsorted(sorted_classes, values), 0, len(sorted_classes) - 1)
        unknown = sorted_classes[pos] != values
        if unknown.any():
            raise ValueError(
                f"{where}: label value {int(values[unknown][0])} is not in label.classes "
                f"{self.classes.tolist()}"
            )
        return order[pos]


def _empty(shape: tuple[int, ...], dtype: type[np.generic]) -> np.ndarray:
    """An uninitialised array in Arrow's memory pool (mimalloc or jemalloc), writable.

    A block's matrices are megabytes: glibc gives such blocks back to the kernel when they
    are freed, so each new block page-faults afresh and the kernel zeroes every page
    (6,700 faults and 7 ms of about 100 per pass over the 1 M-row export's shards). The
    pool keeps freed memory for the next block. The array keeps its buffer alive.
    """
    itemsize = np.dtype(dtype).itemsize
    return np.frombuffer(pa.allocate_buffer(math.prod(shape) * itemsize), dtype=dtype).reshape(shape)


def _class_lookup(classes: np.ndarray) -> np.ndarray | None:
    """Label value -> class index (-1: not a class), when the classes are small non-negative ints."""
    if not classes.size or classes.min() < 0 or classes.max() >= 1 << 16:
        return None
    lookup = np.full(int(classes.max()) + 1, -1, dtype=LABEL_DTYPE)
    lookup[classes[::-1]] = np.arange(classes.size)[::-1]  # a repeated class: its first index
    return lookup


def _unsigned(values: np.ndarray) -> np.ndarray:
    # Read as unsigned, a negative integer is larger than any bound: one max() checks both ends.
    return values.view(f"u{values.dtype.itemsize}")


def _check_ids(ids: np.ndarray, limit: int, where: str, field: str) -> None:
    # An out-of-range id is an obscure device-side assert inside nn.Embedding on CUDA.
    if ids.dtype.kind not in "iu":
        raise ValueError(f"{where}: expected int32 ids, got {ids.dtype}")
    if ids.size and int(_unsigned(ids).max()) >= limit:
        low, high = int(ids.min()), int(ids.max())
        bad = high if high >= limit else low
        raise ValueError(f"{where}: id {bad} is outside [0, {field}={limit})")


def _token_matrix(column: pa.ChunkedArray, n: int, length: int, where: str) -> np.ndarray:
    # A row group is read as one chunk; combine_chunks would copy even that one.
    array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if not (
        pa.types.is_list(array.type)
        or pa.types.is_large_list(array.type)
        or pa.types.is_fixed_size_list(array.type)
    ):
        raise ValueError(f"{where}: expected a list<int32> column, got {array.type}")
    if n and not pa.types.is_fixed_size_list(array.type):
        lengths = pc.list_value_length(array)
        bounds = pc.min_max(lengths)
        if bounds["min"].as_py() != length or bounds["max"].as_py() != length:
            raise ValueError(
                f"{where}: rows hold {bounds['min'].as_py()}..{bounds['max'].as_py()} ids, "
                f"the manifest's shape says exactly {length}"
            )
    flat = array.flatten()
    if flat.null_count:
        raise ValueError(f"{where}: {flat.null_count} of its ids are null; the manifest contract has none")
    if len(flat) != n * length:
        raise ValueError(f"{where}: expected {n} x {length} ids, got {len(flat)}")
    return _writable(flat).reshape(n, length)


def _writable(array: pa.Array) -> np.ndarray:
    """A primitive array's values as numpy, a writable view where its buffer allows.

    A decoded column's buffer belongs to that read alone (mutable), so a tensor made
    from the view is as writable as a copy would be; ``to_numpy`` marks every view
    read-only, and torch warns on those. Anything else (another type, a shared buffer)
    is ``to_numpy``'s.
    """
    data = array.buffers()[1]
    dtype = np.dtype(array.type.to_pandas_dtype()) if pa.types.is_integer(array.type) else None
    if data is None or dtype is None or not data.is_mutable:
        return array.to_numpy(zero_copy_only=False)
    return np.frombuffer(data, dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)


_TENSORS = ("numeric", "categorical", "text", "label")


def _length(block: _Block) -> int:
    return len(block["label"])


def _concat(blocks: list[_Block]) -> _Block:
    if len(blocks) == 1:
        return blocks[0]
    return {key: np.concatenate([b[key] for b in blocks]) for key in blocks[0]}


def _rows(block: _Block, index: slice | np.ndarray) -> _Block:
    return {key: value[index] for key, value in block.items()}


def _to_batch(block: _Block) -> Batch:
    return Batch(
        numeric=torch.from_numpy(block["numeric"]),
        categorical=torch.from_numpy(block["categorical"]),
        text=torch.from_numpy(block["text"]),
        label=torch.from_numpy(block["label"]),
        ids=block.get("ids"),
    )


def _split(block: _Block, batch_size: int) -> list[Batch]:
    """``block``, a whole number of batches, as batches of ``batch_size`` rows: views, no copies.

    One reshape to ``[batches, batch_size, ...]`` and ``unbind`` per tensor cuts all of a
    block's batches at once, rather than four slices and ``from_numpy`` calls per batch
    (a fifth cheaper per view than ``torch.split``: the views are a batch's whole cost
    once the block is converted).
    """
    count, rest = divmod(_length(block), batch_size)
    if rest:
        raise ValueError(f"a block of {_length(block)} rows is not whole batches of {batch_size}")
    parts = [
        torch.from_numpy(block[key]).reshape(count, batch_size, *block[key].shape[1:]).unbind(0)
        for key in _TENSORS
    ]
    ids = block.get("ids")
    return [
        Batch(
            numeric=numeric,
            categorical=categorical,
            text=text,
            label=label,
            ids=None if ids is None else ids[k * batch_size : (k + 1) * batch_size],
        )
        for k, (numeric, categorical, text, label) in enumerate(zip(*parts, strict=True))
    ]


def _mixed(blocks: list[_Block], rng: np.random.Generator) -> _Block:
    """The rows of ``blocks`` together, in one order drawn from ``rng``: each row copied once.

    Each block's rows are written to their drawn places (a scatter), rather than
    concatenated and then gathered (two copies). Numeric arrays go to Arrow's pool, as the
    blocks do (:func:`_empty`); row ids are Python strings (object arrays).
    """
    n = sum(_length(b) for b in blocks)
    places = rng.permutation(n)
    mixed: _Block = {}
    for key, first in blocks[0].items():
        shape = (n, *first.shape[1:])
        out = np.empty(shape, dtype=object) if first.dtype == object else _empty(shape, first.dtype.type)
        start = 0
        for block in blocks:
            stop = start + _length(block)
            out[places[start:stop]] = block[key]
            start = stop
        mixed[key] = out
    return mixed


def _shuffle_buffer(blocks: Iterator[_Block], rows: int, rng: np.random.Generator) -> Iterator[_Block]:
    """Blocks held until they have at least ``rows`` rows, then yielded as one, their rows mixed.

    A bounded shuffle buffer (tf.data's ``shuffle``, MosaicML Streaming's shuffle block):
    rows of different row groups, hence of different shard entries, classes and days, share
    batches, while at most ``rows`` plus one block's rows are held (never a rank's whole
    chunk). The last, partial buffer is yielded as it is. ``rng`` is drawn from in the
    order the blocks arrive, in the thread that iterates this, so the order does not depend
    on how far the reading thread is ahead.
    """
    held: list[_Block] = []
    count = 0
    try:
        for block in blocks:
            held.append(block)
            count += _length(block)
            if count >= rows:
                mixed = _mixed(held, rng)
                held, count = [], 0  # the blocks go while the consumer takes their rows
                yield mixed
        if held:
            yield _mixed(held, rng)
    finally:
        close = getattr(blocks, "close", None)
        if close is not None:
            close()


def _batch_runs(blocks: Iterable[_Block], batch_size: int) -> Iterator[list[Batch]]:
    """Re-cut blocks of any size into ``batch_size`` batches; the last may be short.

    Yields the batches each block completes, as one list (a run): the background thread
    hands a run to the consumer at once, one thread switch per run rather than per batch.
    Only a batch that straddles two blocks is copied.
    """
    pending: _Block | None = None  # fewer than batch_size rows, waiting for the next block
    for block in blocks:
        n = _length(block)
        run: list[Batch] = []
        start = 0
        if pending is not None:
            start = min(n, batch_size - _length(pending))
            pending = _concat([pending, _rows(block, slice(0, start))])
            if _length(pending) == batch_size:
                run.append(_to_batch(pending))
                pending = None
        stop = start + (n - start) // batch_size * batch_size
        if stop > start:
            run += _split(_rows(block, slice(start, stop)), batch_size)
        if stop < n:
            pending = _rows(block, slice(stop, n))
        if run:
            yield run
    if pending is not None:
        yield [_to_batch(pending)]


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()
# Pinned batches are handed over in parts of at most this many: pinning copies, so a part
# bounds the pinned memory a run holds and lets the consumer start before a long run is done.
PINNED_PART_BATCHES = 64


def prefetch(runs: Iterator[list[Batch]], depth: int, *, pin_memory: bool = False) -> Iterator[Batch]:
    """Produce the batches of ``runs`` in a background thread, ``depth`` or more ahead of the consumer.

    pyarrow's reads and numpy's copies release the GIL, so the thread overlaps I/O and
    decoding with the training step. Batches cross to the consumer a run at a time (a row
    group's worth, views of one block: one thread switch per run, not per batch; pinned,
    in parts of at most ``PINNED_PART_BATCHES``), and the thread waits while ``depth``
    batches or more wait: when it keeps up, at least ``depth`` batches are ready, and
    fewer than ``depth`` plus one run. The thread starts at once, not at the first
    ``next``: an iterator made before it is needed (the next epoch's, made while rank 0
    evaluates) is already reading. An error in the thread is raised in the consumer.
    """
    if depth <= 0:
        return (batch for run in runs for batch in run)
    return _Background(runs, depth, Batch.pin_memory if pin_memory else None, "lakeprep-prefetch")


class _Channel:
    """What a producer thread and its consumer share: parts of runs, at most ``depth`` items waiting.

    The thread holds this, not the consumer's iterator, so an iterator dropped before its
    end is still collected, and its ``__del__`` stops the thread.
    """

    def __init__(self, depth: int) -> None:
        self.depth = max(1, depth)
        self.parts: collections.deque = collections.deque()  # lists of items, then _END or _Failure
        self.waiting = 0  # items in self.parts
        self.changed = threading.Condition()
        self.stop = threading.Event()

    def offer(self, part: object, size: int) -> bool:
        """Queue ``part`` once fewer than ``depth`` items wait; False once the consumer stopped."""
        with self.changed:
            while self.waiting >= self.depth and not self.stop.is_set():
                self.changed.wait(timeout=0.1)  # a dropped iterator sets stop without notifying
            if self.stop.is_set():
                return False
            self.parts.append(part)
            self.waiting += size
            self.changed.notify_all()
        return True

    def take(self) -> object:
        with self.changed:
            while not self.parts:
                self.changed.wait()
            part = self.parts.popleft()
            if isinstance(part, list):
                self.waiting -= len(part)
            self.changed.notify_all()
        return part

    def close(self) -> None:
        with self.changed:
            self.stop.set()
            self.changed.notify_all()


def _produce(channel: _Channel, runs: Iterator[list[_T]], prepare: Callable[[_T], _T] | None) -> None:
    try:
        for run in runs:
            parts: Iterable[list[_T]] = [run]
            if prepare is not None:
                parts = (
                    [prepare(item) for item in run[start : start + PINNED_PART_BATCHES]]
                    for start in range(0, len(run), PINNED_PART_BATCHES)
                )
            for part in parts:
                if part and not channel.offer(part, len(part)):
                    return
        channel.offer(_END, 0)
    except BaseException as err:  # handed to the consumer, which re-raises it
        channel.offer(_Failure(err), 0)
    finally:
        close = getattr(runs, "close", None)
        if close is not None:
            close()


class _Background(Iterator[_T]):
    """The items of ``runs`` (lists), produced by a thread while the consumer takes them."""

    def __init__(
        self, runs: Iterator[list[_T]], depth: int, prepare: Callable[[_T], _T] | None, name: str
    ) -> None:
        self._channel = _Channel(depth)
        self._current: collections.deque = collections.deque()  # the part being consumed
        self._done = False
        self._thread = threading.Thread(
            target=_produce, args=(self._channel, runs, prepare), name=name, daemon=True
        )
        self._thread.start()

    def __next__(self) -> _T:
        if self._current:
            return self._current.popleft()
        if self._done:
            raise StopIteration
        part = self._channel.take()
        if part is _END:
            self.close()
            raise StopIteration
        if isinstance(part, _Failure):
            self.close()
            raise part.error
        self._current.extend(part)
        return self._current.popleft()

    def close(self) -> None:
        """Stop the thread (also when the consumer stops early)."""
        self._done = True
        self._current.clear()
        self._channel.close()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def __del__(self) -> None:
        self._channel.stop.set()


@dataclass(frozen=True)
class ShardSpan:
    """Rows ``[start, stop)`` of the split's shard ``index`` (its position in ``shards``)."""

    index: int
    start: int
    stop: int


@dataclass(frozen=True)
class RankPlan:
    """One rank's share of one split for one epoch, as :func:`plan_rank` computes it."""

    world_size: int
    rank: int
    batch_size: int
    remainder: str
    rows_in_shards: int  # N: every shard's rows, as the manifest lists them
    rows_per_rank: int
    steps_per_rank: int
    rows_dropped: int  # per epoch, over all ranks (remainder "drop")
    rows_padded: int  # per epoch, over all ranks (remainder "pad"): repeats of rows read
    spans: tuple[ShardSpan, ...]  # what this rank reads, in order

    def to_json(self) -> dict[str, int | str]:
        """The plan's numbers, the same on every rank and epoch (for metrics and logs)."""
        return {
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "remainder": self.remainder,
            "rows_in_shards": self.rows_in_shards,
            "rows_per_rank": self.rows_per_rank,
            "steps_per_rank": self.steps_per_rank,
            "rows_dropped_per_epoch": self.rows_dropped,
            "rows_padded_per_epoch": self.rows_padded,
        }


def plan_rank(
    split: Split,
    world_size: int,
    rank: int,
    *,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = False,
    where: str = "",
) -> RankPlan:
    """Pure: rank ``rank``'s rows of ``split`` among ``world_size`` ranks, from the manifest alone.

    Deterministic in ``(split's shard rows, remainder, world_size, seed, epoch)``: every
    rank computes the same global order, so the ranks' chunks are disjoint and cover the
    order without any communication. See the module docstring for the steps.

    :raises ValueError: when the split has fewer rows than ranks (a rank would get none).
    """
    where = where or f"splits.{split.name}"
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"{where}: rank {rank} must be in [0, world_size={world_size})")
    rows = [s.rows for s in split.shards]
    n = sum(rows)
    if n < world_size:
        raise ValueError(
            f"{where}: the split has {n} rows, fewer than the {world_size} ranks of this run; "
            f"every rank needs at least one row (launch at most {n} process(es) or export more rows)"
        )
    remainder, batch = split.plan.remainder, split.plan.batch_size
    per_rank = rows_per_rank_for(n, world_size, remainder)
    total = per_rank * world_size
    order = np.arange(len(rows))
    if shuffle:
        # Seeded by (seed, epoch) only, never the rank: all ranks must agree on the order.
        order = np.random.default_rng([seed, epoch]).permutation(len(rows))
    offsets = np.concatenate([[0], np.cumsum([rows[i] for i in order])])
    first, last = rank * per_rank, (rank + 1) * per_rank
    # Positions past N wrap to the start of the order (pad); per_rank <= N wraps at most once.
    pieces = [(first, min(last, n))] + ([(max(first, n) - n, last - n)] if last > n else [])
    spans = []
    for lo, hi in pieces:
        for k, index in enumerate(order):
            start, stop = max(lo, int(offsets[k])), min(hi, int(offsets[k + 1]))
            if start < stop:
                spans.append(ShardSpan(int(index), start - int(offsets[k]), stop - int(offsets[k])))
    return RankPlan(
        world_size=world_size,
        rank=rank,
        batch_size=batch,
        remainder=remainder,
        rows_in_shards=n,
        rows_per_rank=per_rank,
        steps_per_rank=math.ceil(per_rank / batch),
        rows_dropped=max(0, n - total),
        rows_padded=max(0, total - n),
        spans=tuple(spans),
    )


# A synthetic entry's rows as read: (its copy k, the file's path, the row group's first row
# in the file, the first row read within the group, the group's rows).
_Synthetic = tuple[int, str, int, int, int]
# One row group's rows as read: (where, the rows, their shuffled order or None, and
# which synthetic copy they are read as, None for real rows).
_Piece = tuple[str, pa.Table, np.ndarray | None, _Synthetic | None]


def _file_problem(
    shard: Shard, rows: int, schema: pa.Schema, expected: Mapping[str, str] | None
) -> str | None:
    """Why the file (its footer's rows and schema) cannot serve the entry: too few rows for its
    offset and rows, or (``expected``, prepared shards) a column missing or of another type."""
    problem = shard.file_rows_problem(rows)
    if problem is None and expected is not None:
        problems = column_problems(schema, expected)
        if problems:
            problem = f"{'; '.join(problems)} (shard_columns 'prepared', docs/MANIFEST.md)"
    return problem


def _span_tables(
    split: Split,
    spans: Iterable[ShardSpan],
    columns: list[str],
    rng: np.random.Generator | None,
    where: str,
    expected: Mapping[str, str] | None = None,
    read_dictionary: list[str] | None = None,
    *,
    row_order: bool = True,
) -> Iterator[_Piece]:
    """The row groups of ``spans`` as pyarrow tables, sliced to the spans: the I/O and decoding.

    A span's rows are rows of its shard entry, which starts at the entry's ``offset`` in
    its file: only the row groups the span overlaps there are read. ``expected``: the
    column types each file must have (prepared shards). ``rng`` draws the order of the
    row groups within a span and (``row_order``) of the rows within each row group here,
    in reading order, so that the order does not depend on which thread converts the rows.
    Without ``row_order`` the rows keep the file's order (a shuffle buffer mixes them).
    """
    for span in spans:
        shard = split.shards[span.index]
        at = f"{where} shard {shard.path}".strip()
        first, last = shard.offset + span.start, shard.offset + span.stop  # rows of the file
        try:
            with storage.open_input(shard.location) as f:
                parquet = pq.ParquetFile(f, read_dictionary=read_dictionary or None)
                metadata = parquet.metadata
                problem = _file_problem(shard, metadata.num_rows, parquet.schema_arrow, expected)
                if problem:
                    raise ValueError(f"{at}: {problem}")
                starts = np.cumsum(
                    [0] + [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
                )
                groups = [
                    g for g in range(metadata.num_row_groups) if starts[g] < last and starts[g + 1] > first
                ]
                if rng is not None:
                    groups = [groups[i] for i in rng.permutation(len(groups))]
                for group in groups:
                    lo = max(first, int(starts[group])) - int(starts[group])
                    hi = min(last, int(starts[group + 1])) - int(starts[group])
                    table = parquet.read_row_group(group, columns=columns).slice(lo, hi - lo)
                    order = rng.permutation(hi - lo) if rng is not None and row_order else None
                    synthetic = None
                    if shard.synthetic:
                        group_rows = int(starts[group + 1] - starts[group])
                        synthetic = (shard.synthetic, shard.path, int(starts[group]), lo, group_rows)
                    yield at, table, order, synthetic
        except (OSError, pa.ArrowException) as err:
            raise ValueError(f"{at}: cannot read {shard.location}: {err}") from err


def _blocks(
    pieces: Iterator[_Piece], layout: FeatureLayout, augmentation: Augmentation | None = None
) -> Iterator[_Block]:
    """Convert and check each row group read (the CPU half of reading); the rows of a
    synthetic entry are augmented (``augmentation``, before they are shuffled)."""
    try:
        for at, table, order, synthetic in pieces:
            block = layout.to_block(table, at)
            if synthetic is not None:
                if augmentation is None:
                    raise ValueError(
                        f"{at}: a synthetic entry, but the manifest's balance names no augmentation"
                    )
                block = augmentation.apply(block, *synthetic)
            yield block if order is None else _rows(block, order)
    finally:
        close = getattr(pieces, "close", None)
        if close is not None:
            close()


def _batch_pipeline(
    split: Split,
    spans: Iterable[ShardSpan],
    layout: FeatureLayout,
    batch_size: int,
    *,
    with_ids: bool,
    rng: np.random.Generator | None,
    where: str,
    read_ahead: bool,
    shuffle_rows: int = 0,
    augmentation: Augmentation | None = None,
) -> Iterator[list[Batch]]:
    """The batches of ``spans`` in runs (:func:`_batch_runs`).

    With ``read_ahead`` a thread of its own reads the next row group while this one is
    converted and cut (the caller's thread, normally :func:`prefetch`'s): pyarrow decodes
    without the GIL, so reading and converting overlap. Shards are exported in row groups
    of a bounded number of rows (docs/MANIFEST.md), so there are several to overlap.

    With ``rng`` and ``shuffle_rows``, the reader permutes the row groups of each span
    (drawing from ``rng`` in the reading thread) and a shuffle buffer of ``shuffle_rows``
    rows (:func:`_shuffle_buffer`) mixes the rows of consecutive row groups (drawing from a
    generator spawned from ``rng`` here, before reading starts, in the converting thread):
    each generator is drawn from by one thread, in reading order, so the batches are the
    same whether or not the threads run ahead.
    """
    mixing = rng.spawn(1)[0] if rng is not None and shuffle_rows > 0 else None
    pieces: Iterator[_Piece] = _span_tables(
        split,
        spans,
        layout.columns(with_ids),
        rng,
        where,
        layout.expected,
        layout.read_dictionary,
        row_order=mixing is None,  # the buffer orders the rows
    )
    if read_ahead:
        pieces = _Background(([piece] for piece in pieces), 1, None, "lakeprep-read")
    blocks = _blocks(pieces, layout, augmentation)
    if mixing is not None:
        blocks = _shuffle_buffer(blocks, shuffle_rows, mixing)
    return _batch_runs(blocks, batch_size)


class RankBatches(IterableDataset):
    """The batches of one rank of one split, exactly ``steps_per_rank`` per epoch.

    ``world_size`` is the job's (torchrun's WORLD_SIZE), whatever the export was planned
    for; the rows are planned at read time by :func:`plan_rank` (default: the manifest's
    ``plan.world_size``). With ``shuffle``, the order of the shards comes from
    ``(seed, epoch)`` (the same on every rank) and the order of row groups and rows
    within this rank's chunk from ``(seed, epoch, rank)``, and a shuffle buffer mixes the
    rows of consecutive row groups, ``shuffle_rows`` or more at a time
    (:data:`SHUFFLE_BUFFER_ROWS`): reproducible and different per epoch. Call
    :meth:`set_epoch` before each epoch. Batches are already collated:
    use directly, or ``DataLoader(ds, batch_size=None)`` with the default
    ``num_workers=0`` (each worker would read the whole rank again; the background
    thread does the prefetching).
    """

    def __init__(
        self,
        manifest: Manifest,
        split: str,
        rank: int,
        *,
        world_size: int | None = None,
        seed: int = 0,
        shuffle: bool = False,
        shuffle_rows: int = SHUFFLE_BUFFER_ROWS,
        prefetch: int = 2,
        pin_memory: bool = False,
        with_ids: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(shuffle_rows, bool) or not isinstance(shuffle_rows, int) or shuffle_rows < 1:
            raise ValueError(
                f"RankBatches shuffle_rows {shuffle_rows!r} must be a positive number of rows (the shuffle "
                f"buffer's size; default {SHUFFLE_BUFFER_ROWS})"
            )
        self.manifest = manifest
        self.split: Split = manifest.split(split)
        self.world_size = world_size if world_size is not None else self.split.plan.world_size
        self.rank = rank
        self.seed = seed
        self.shuffle = shuffle
        self.shuffle_rows = shuffle_rows
        self.epoch = 0
        # Raises on a bad rank or a split with fewer rows than ranks, before any collective.
        self.plan = self.plan_for_epoch(0)
        self.layout = FeatureLayout(manifest)
        self.prefetch_depth = prefetch
        self.pin_memory = pin_memory
        self.with_ids = with_ids
        self.skip_steps = 0

    @property
    def where(self) -> str:
        return f"{self.manifest.location}: splits.{self.split.name} rank {self.rank}"

    def __len__(self) -> int:
        return self.plan.steps_per_rank

    def plan_for_epoch(self, epoch: int) -> RankPlan:
        return plan_rank(
            self.split,
            self.world_size,
            self.rank,
            seed=self.seed,
            epoch=epoch,
            shuffle=self.shuffle,
            where=f"{self.manifest.location}: splits.{self.split.name}",
        )

    def set_epoch(self, epoch: int, *, start_step: int = 0) -> None:
        """Plan ``epoch``; the next iteration starts at batch ``start_step`` (a resumed run).

        The skipped batches are still read and checked against the plan (their rows are
        what makes the position exact), but not prefetched, pinned or yielded.
        """
        plan = self.plan_for_epoch(epoch)
        if not 0 <= start_step <= plan.steps_per_rank:
            raise ValueError(
                f"{self.where}: start step {start_step} is outside epoch {epoch}'s "
                f"{plan.steps_per_rank} steps"
            )
        self.epoch, self.plan, self.skip_steps = epoch, plan, start_step

    def check_shards(self) -> None:
        """Compare every shard's Parquet footer with the manifest, before any collective starts.

        All of the split's shards, not only this epoch's: later epochs read others, and a
        rank that fails mid-epoch leaves the others waiting at the next all-reduce. Each
        file's footer is read once, however many entries slice it; prepared shards'
        column types are checked against the transform's roles too.
        """
        footers: dict[str, tuple[int, pa.Schema]] = {}  # location -> (rows, schema)
        for shard in self.split.shards:
            if shard.location not in footers:
                try:
                    with storage.open_input(shard.location) as f:
                        parquet = pq.ParquetFile(f)
                        footers[shard.location] = (parquet.metadata.num_rows, parquet.schema_arrow)
                except (OSError, pa.ArrowException) as err:
                    raise ValueError(f"{self.where}: cannot read shard {shard.path}: {err}") from err
            problem = _file_problem(shard, *footers[shard.location], self.layout.expected)
            if problem:
                raise ValueError(f"{self.where}: shard {shard.path} {problem}")

    def __iter__(self) -> Iterator[Batch]:
        plan = self.plan
        rng = np.random.default_rng([self.seed, self.epoch, self.rank]) if self.shuffle else None
        runs = _batch_pipeline(
            self.split,
            plan.spans,
            self.layout,
            plan.batch_size,
            with_ids=self.with_ids,
            rng=rng,
            where=self.where,
            read_ahead=self.prefetch_depth > 0,
            shuffle_rows=self.shuffle_rows,
            # A prepared export's synthetic train rows, augmented afresh each epoch.
            augmentation=Augmentation.of(self.manifest.balance, seed=self.seed, epoch=self.epoch),
        )
        planned = self._hold_to_plan(runs, plan)
        skip, self.skip_steps = self.skip_steps, 0
        if skip:
            planned = _skip_batches(planned, skip)
        return prefetch(planned, self.prefetch_depth, pin_memory=self.pin_memory)

    def _hold_to_plan(self, runs: Iterator[list[Batch]], plan: RankPlan) -> Iterator[list[Batch]]:
        rows = steps = 0
        for run in runs:
            rows += sum(len(batch) for batch in run)
            steps += len(run)
            if rows > plan.rows_per_rank:
                raise ValueError(f"{self.where}: read more than the planned {plan.rows_per_rank} rows")
            yield run
        if rows != plan.rows_per_rank or steps != plan.steps_per_rank:
            raise ValueError(
                f"{self.where}: read {rows} rows in {steps} steps, the plan for world size "
                f"{plan.world_size} says {plan.rows_per_rank} rows in {plan.steps_per_rank} steps"
            )


def _skip_batches(runs: Iterator[list[Batch]], count: int) -> Iterator[list[Batch]]:
    """``runs`` without their first ``count`` batches."""
    for run in runs:
        if count >= len(run):
            count -= len(run)
            continue
        yield run[count:]
        count = 0


def split_batches(
    manifest: Manifest,
    split: str,
    *,
    batch_size: int | None = None,
    with_ids: bool = False,
    prefetch_depth: int = 2,
) -> Iterator[Batch]:
    """Every shard of a split, all ranks' in manifest order: for evaluation on one process."""
    chosen = manifest.split(split)
    runs = _batch_pipeline(
        chosen,
        [ShardSpan(i, 0, shard.rows) for i, shard in enumerate(chosen.shards)],
        FeatureLayout(manifest),
        batch_size or chosen.plan.batch_size,
        with_ids=with_ids,
        rng=None,
        where=f"{manifest.location}: splits.{split}",
        read_ahead=prefetch_depth > 0,
        augmentation=Augmentation.of(manifest.balance, seed=0, epoch=0),
    )
    return prefetch(runs, prefetch_depth)
