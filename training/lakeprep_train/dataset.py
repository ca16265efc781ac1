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
per-row Python), and a background thread keeps the next batches ready in a bounded
queue so the training loop does not wait on I/O.
"""

from __future__ import annotations

import itertools
import math
import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
from torch.utils.data import IterableDataset

from lakeprep_train import storage
from lakeprep_train.manifest import rows_per_rank_for

if TYPE_CHECKING:
    from lakeprep_train.manifest import Manifest, Shard, Split

_Block = dict[str, np.ndarray]  # one chunk of rows: tensor name -> numpy array


@dataclass
class Batch:
    """One step's rows, as the model takes them."""

    numeric: torch.Tensor  # float32 [B, n_numeric]
    categorical: torch.Tensor  # int64 [B, n_categorical]
    text: torch.Tensor  # int64 [B, n_text, L], 0 = padding
    label: torch.Tensor  # int64 [B], index into manifest label.classes
    ids: np.ndarray | None = None  # object [B] of row ids, when asked for

    def __len__(self) -> int:
        return int(self.label.shape[0])

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
    """Which shard columns go into which tensor, in the manifest's feature order."""

    def __init__(self, manifest: Manifest) -> None:
        self.location = manifest.location
        self.numeric = manifest.features_with_role("numeric")
        self.categorical = manifest.features_with_role("categorical")
        self.text = manifest.features_with_role("text")
        self.label = manifest.label.name
        self.classes = np.asarray(manifest.label.classes, dtype=np.int64)
        # Text features of different lengths share one tensor: shorter ones are padded
        # with id 0, which the model's EmbeddingBag(padding_idx=0) ignores.
        self.text_length = max((f.length for f in self.text), default=0)

    def columns(self, with_ids: bool) -> list[str]:
        names = [f.name for f in (*self.numeric, *self.categorical, *self.text)]
        return [*(["id"] if with_ids else []), self.label, *names]

    def to_block(self, table: pa.Table, where: str) -> _Block:
        """Convert a row group to numpy, checking what the contract promises."""
        n = table.num_rows
        for name in table.column_names:
            if table.column(name).null_count:
                raise ValueError(f"{where}: column {name!r} has nulls; the manifest contract has none")
        numeric = np.empty((n, len(self.numeric)), dtype=np.float32)
        for j, f in enumerate(self.numeric):
            numeric[:, j] = table.column(f.name).to_numpy()
        if not np.isfinite(numeric).all():
            bad = [f.name for j, f in enumerate(self.numeric) if not np.isfinite(numeric[:, j]).all()]
            raise ValueError(f"{where}: numeric column(s) {bad} hold NaN or infinity")
        categorical = np.empty((n, len(self.categorical)), dtype=np.int64)
        for j, f in enumerate(self.categorical):
            categorical[:, j] = table.column(f.name).to_numpy()
            _check_ids(categorical[:, j], f.cardinality, f"{where}: categorical {f.name!r}", "cardinality")
        text = np.zeros((n, len(self.text), self.text_length), dtype=np.int64)
        for j, f in enumerate(self.text):
            text[:, j, : f.length] = _token_matrix(
                table.column(f.name), n, f.length, f"{where}: text {f.name!r}"
            )
            _check_ids(text[:, j, : f.length], f.vocab_size, f"{where}: text {f.name!r}", "vocab_size")
        block: _Block = {
            "numeric": numeric,
            "categorical": categorical,
            "text": text,
            "label": self._class_index(table.column(self.label).to_numpy(), where),
        }
        if "id" in table.column_names:
            block["ids"] = table.column("id").to_numpy(zero_copy_only=False)
        return block

    def _class_index(self, values: np.ndarray, where: str) -> np.ndarray:
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


def _check_ids(ids: np.ndarray, limit: int | None, where: str, field: str) -> None:
    # An out-of-range id is an obscure device-side assert inside nn.Embedding on CUDA.
    if ids.size and (ids.min() < 0 or ids.max() >= limit):
        bad = int(ids.max() if ids.max() >= limit else ids.min())
        raise ValueError(f"{where}: id {bad} is outside [0, {field}={limit})")


def _token_matrix(column: pa.ChunkedArray, n: int, length: int, where: str) -> np.ndarray:
    array = column.combine_chunks()
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
    values = array.flatten().to_numpy()
    if values.size != n * length:
        raise ValueError(f"{where}: expected {n} x {length} ids, got {values.size}")
    return values.reshape(n, length)


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


def read_blocks(
    shards: Iterable[Shard],
    layout: FeatureLayout,
    *,
    with_ids: bool = False,
    rng: np.random.Generator | None = None,
    where: str = "",
) -> Iterator[_Block]:
    """Row groups of ``shards`` in order, as numpy blocks; ``rng`` shuffles within a shard."""
    columns = layout.columns(with_ids)
    for shard in shards:
        at = f"{where} shard {shard.path}".strip()
        try:
            with storage.open_input(shard.location) as f:
                parquet = pq.ParquetFile(f)
                groups = np.arange(parquet.num_row_groups)
                if rng is not None:
                    groups = rng.permutation(groups)
                for group in groups:
                    block = layout.to_block(parquet.read_row_group(int(group), columns=columns), at)
                    if rng is not None:
                        block = _rows(block, rng.permutation(len(block["label"])))
                    yield block
        except (OSError, pa.ArrowException) as err:
            raise ValueError(f"{at}: cannot read {shard.location}: {err}") from err


def batch_blocks(blocks: Iterable[_Block], batch_size: int) -> Iterator[Batch]:
    """Re-cut blocks of any size into ``batch_size`` batches; the last may be short."""
    pending: list[_Block] = []
    pending_rows = 0
    for block in blocks:
        pending.append(block)
        pending_rows += len(block["label"])
        if pending_rows < batch_size:
            continue
        merged = _concat(pending)
        start = 0
        while pending_rows - start >= batch_size:
            yield _to_batch(_rows(merged, slice(start, start + batch_size)))
            start += batch_size
        pending = [_rows(merged, slice(start, pending_rows))] if start < pending_rows else []
        pending_rows -= start
    if pending_rows:
        yield _to_batch(_concat(pending))


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()


def prefetch(batches: Iterator[Batch], depth: int, *, pin_memory: bool = False) -> Iterator[Batch]:
    """Produce ``batches`` in a background thread, at most ``depth`` ahead of the consumer.

    pyarrow's reads and numpy's copies release the GIL, so the thread overlaps I/O and
    decoding with the training step. The thread starts at once, not at the first
    ``next``: an iterator made before it is needed (the next epoch's, made while rank 0
    evaluates) is already reading. An error in the thread is raised in the consumer.
    """
    if depth <= 0:
        return iter(batches)
    return _Prefetched(batches, depth, pin_memory)


class _Prefetched(Iterator[Batch]):
    def __init__(self, batches: Iterator[Batch], depth: int, pin_memory: bool) -> None:
        self._ready: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(
            target=self._produce, args=(batches, pin_memory), name="lakeprep-prefetch", daemon=True
        )
        self._thread.start()

    def _offer(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self, batches: Iterator[Batch], pin_memory: bool) -> None:
        try:
            for batch in batches:
                if not self._offer(batch.pin_memory() if pin_memory else batch):
                    return
            self._offer(_END)
        except BaseException as err:  # handed to the consumer, which re-raises it
            self._offer(_Failure(err))
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    def __next__(self) -> Batch:
        if self._done:
            raise StopIteration
        item = self._ready.get()
        if item is _END:
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            raise item.error
        return item

    def close(self) -> None:
        """Stop the reader thread (also when the consumer stops early)."""
        self._done = True
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def __del__(self) -> None:
        self._stop.set()


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


def read_spans(
    split: Split,
    spans: Iterable[ShardSpan],
    layout: FeatureLayout,
    *,
    with_ids: bool = False,
    rng: np.random.Generator | None = None,
    where: str = "",
) -> Iterator[_Block]:
    """The rows of ``spans`` as numpy blocks, reading only the row groups they overlap.

    ``rng`` shuffles the row groups within a span and the rows within a row group.
    """
    columns = layout.columns(with_ids)
    for span in spans:
        shard = split.shards[span.index]
        at = f"{where} shard {shard.path}".strip()
        try:
            with storage.open_input(shard.location) as f:
                parquet = pq.ParquetFile(f)
                metadata = parquet.metadata
                if metadata.num_rows != shard.rows:
                    raise ValueError(
                        f"{at}: has {metadata.num_rows} rows, the manifest's rows says {shard.rows}"
                    )
                starts = np.cumsum(
                    [0] + [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
                )
                groups = [
                    g
                    for g in range(metadata.num_row_groups)
                    if starts[g] < span.stop and starts[g + 1] > span.start
                ]
                if rng is not None:
                    groups = [groups[i] for i in rng.permutation(len(groups))]
                for group in groups:
                    lo = max(span.start, int(starts[group])) - int(starts[group])
                    hi = min(span.stop, int(starts[group + 1])) - int(starts[group])
                    table = parquet.read_row_group(group, columns=columns).slice(lo, hi - lo)
                    block = layout.to_block(table, at)
                    if rng is not None:
                        block = _rows(block, rng.permutation(len(block["label"])))
                    yield block
        except (OSError, pa.ArrowException) as err:
            raise ValueError(f"{at}: cannot read {shard.location}: {err}") from err


class RankBatches(IterableDataset):
    """The batches of one rank of one split, exactly ``steps_per_rank`` per epoch.

    ``world_size`` is the job's (torchrun's WORLD_SIZE), whatever the export was planned
    for; the rows are planned at read time by :func:`plan_rank` (default: the manifest's
    ``plan.world_size``). With ``shuffle``, the order of the shards comes from
    ``(seed, epoch)`` (the same on every rank) and the order of row groups and rows
    within this rank's chunk from ``(seed, epoch, rank)``: reproducible and different
    per epoch. Call :meth:`set_epoch` before each epoch. Batches are already collated:
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
        prefetch: int = 2,
        pin_memory: bool = False,
        with_ids: bool = False,
    ) -> None:
        super().__init__()
        self.manifest = manifest
        self.split: Split = manifest.split(split)
        self.world_size = world_size if world_size is not None else self.split.plan.world_size
        self.rank = rank
        self.seed = seed
        self.shuffle = shuffle
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
        rank that fails mid-epoch leaves the others waiting at the next all-reduce.
        """
        for shard in self.split.shards:
            try:
                with storage.open_input(shard.location) as f:
                    rows = pq.ParquetFile(f).metadata.num_rows
            except (OSError, pa.ArrowException) as err:
                raise ValueError(f"{self.where}: cannot read shard {shard.path}: {err}") from err
            if rows != shard.rows:
                raise ValueError(
                    f"{self.where}: shard {shard.path} has {rows} rows, the manifest's rows says {shard.rows}"
                )

    def __iter__(self) -> Iterator[Batch]:
        plan = self.plan
        rng = np.random.default_rng([self.seed, self.epoch, self.rank]) if self.shuffle else None
        blocks = read_spans(
            self.split, plan.spans, self.layout, with_ids=self.with_ids, rng=rng, where=self.where
        )
        planned = self._hold_to_plan(batch_blocks(blocks, plan.batch_size), plan)
        skip, self.skip_steps = self.skip_steps, 0
        if skip:
            planned = itertools.islice(planned, skip, None)
        return prefetch(planned, self.prefetch_depth, pin_memory=self.pin_memory)

    def _hold_to_plan(self, batches: Iterator[Batch], plan: RankPlan) -> Iterator[Batch]:
        rows = steps = 0
        for batch in batches:
            rows += len(batch)
            steps += 1
            if rows > plan.rows_per_rank:
                raise ValueError(f"{self.where}: read more than the planned {plan.rows_per_rank} rows")
            yield batch
        if rows != plan.rows_per_rank or steps != plan.steps_per_rank:
            raise ValueError(
                f"{self.where}: read {rows} rows in {steps} steps, the plan for world size "
                f"{plan.world_size} says {plan.rows_per_rank} rows in {plan.steps_per_rank} steps"
            )


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
    blocks = read_blocks(
        chosen.shards,
        FeatureLayout(manifest),
        with_ids=with_ids,
        where=f"{manifest.location}: splits.{split}",
    )
    return prefetch(batch_blocks(blocks, batch_size or chosen.plan.batch_size), prefetch_depth)
