"""A fitted transform applied to prepared columns: the one implementation, numpy over Arrow.

Step 3 of docs/TRANSFORM.md. ``transform.json`` says what each feature becomes; this
module is the only code that makes it so, wherever rows are encoded:

- the export, in Spark: ``lakeprep_jobs.transform.apply_transform`` runs :func:`encode`
  on each Arrow record batch of the window's rows (``DataFrame.mapInArrow``);
- serving and ``predict``: ``lakeprep_train.transform.apply_transform`` cleans raw
  records into prepared columns (step 2, Spark's casts and tokenizer mirrored) and calls
  :func:`encode`.

Prepared columns are what preprocess writes and what step 2 makes of a raw record:

- a numeric: a number (double, float, integer, decimal or boolean); null or NaN is missing;
- a categorical: a trimmed string, null when missing;
- a text: a list of tokens (``list<string>``), null as no tokens; a text of ``encoding:
  tokenizer`` is the cleaned text itself (a string, null as empty), which the tokenizer
  file splits into subword ids here, and only here.

Outputs: ``num__*`` float32 ``[n]`` (``(fill(x), clip, - center) / scale`` in float64
then rounded once, as the shard stores it), ``cat__*`` int32 ``[n]`` (0 missing, 1 unseen,
then vocabulary position + 2 or ``1 + pmod(xxhash64(value), buckets - 1)``), ``txt__*``
int32 ``[n, max_tokens]`` (the first ``max_tokens`` token ids, 0-padded), principal
components float32 ``[n]``. Hashes and vocabulary look-ups run once per distinct value
(``dictionary_encode``), never per row in Python.

Spark's ``xxhash64(string)`` is the hashing rule: XXH64 of the UTF-8 bytes with seed 42,
as a signed 64-bit integer (the ``xxhash`` package), then ``pmod`` (numpy's ``%`` with a
positive divisor). The per-day statistics count hashed ids with Spark's own function
(``lakeprep_jobs.fit_statistics``); ``tests/training/test_transform.py`` holds the two
equal.
"""

from __future__ import annotations

import copy
import functools
import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from lakeprep_contracts.records import FEATURE_ROLES
from lakeprep_contracts.text import SUBWORD

if TYPE_CHECKING:
    from tokenizers import Tokenizer

HASH_SEED = 42
MISSING_ID = 0
UNSEEN_ID = 1
PADDING_ID = 0
ROLES = FEATURE_ROLES  # the document's sections, in order

_UINT64 = 1 << 64
_INT64_MAX = (1 << 63) - 1


class TransformError(ValueError):
    """A transform document that cannot be used, or a column it cannot encode."""


# ------------------------------------------------------------------ Spark's hashing


def spark_xxhash64(values: Sequence[str | None]) -> np.ndarray:
    """Spark's ``xxhash64(string)`` of each value: int64 (seed 42; null hashes to the seed).

    Spark hashes the UTF-8 bytes with XXH64 and returns the 64 bits as a signed long
    (``org.apache.spark.sql.catalyst.expressions.XxHash64``); a null leaves the seed.
    """
    out = np.empty(len(values), dtype=np.int64)
    for i, value in enumerate(values):
        if value is None:
            out[i] = HASH_SEED
            continue
        unsigned = xxhash.xxh64_intdigest(value.encode("utf-8", "surrogatepass"), seed=HASH_SEED)
        out[i] = unsigned - _UINT64 if unsigned > _INT64_MAX else unsigned
    return out


def hashed_ids(hashes: np.ndarray, buckets: int) -> np.ndarray:
    """``1 + pmod(hash, buckets - 1)`` as int32: ids 1..buckets-1, 0 stays for missing.

    numpy's ``%`` takes the sign of the divisor, which is Spark's ``pmod`` for a
    positive divisor.
    """
    return (1 + np.remainder(hashes, np.int64(buckets - 1))).astype(np.int32)


def distinct(array: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """(distinct values, index of each row's value): work per distinct value, not per row."""
    encoded = pc.dictionary_encode(array, null_encoding="encode")
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    return encoded.dictionary, encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)


def as_array(values: Any) -> pa.Array:
    """One Arrow array from an Array, a ChunkedArray, a numpy array or a sequence."""
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    if isinstance(values, pa.Array):
        return values
    if isinstance(values, np.ndarray) and values.dtype.kind in "fiub":
        return pa.array(values, from_pandas=False)
    return pa.array(values.tolist() if isinstance(values, np.ndarray) else list(values))


# ------------------------------------------------------------------------ one feature


def numbers(values: Any, *, where: str = "") -> np.ndarray:
    """A prepared numeric column as float64, NaN wherever the value is missing."""
    array = as_array(values)
    kind = array.type
    if pa.types.is_boolean(kind):
        array = array.cast(pa.int8())
    elif not (
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_decimal(kind)
        or pa.types.is_null(kind)
    ):
        raise TransformError(f"{where}: a {kind} column cannot be a numeric feature (cast to double)")
    return array.cast(pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


def scale_numeric(values: np.ndarray, spec: Mapping[str, Any]) -> np.ndarray:
    """Fill the missing (NaN), clip, ``(x - center) / scale``, in float64."""
    x = np.where(np.isnan(values), float(spec["fill"]), values)
    clip = spec["clip"]
    if clip is not None:
        x = np.minimum(np.maximum(x, float(clip["lower"])), float(clip["upper"]))
    return (x - float(spec["center"])) / float(spec["scale"])


def encode_numeric(values: np.ndarray, spec: Mapping[str, Any]) -> np.ndarray:
    """A numeric feature: fill, clip, ``(x - center) / scale``, float32."""
    return scale_numeric(values, spec).astype(np.float32)


def project_pca(scaled: Sequence[np.ndarray], pca: Mapping[str, Any]) -> np.ndarray:
    """The principal components of the scaled inputs (float64 ``[n]`` each): float32 ``[k, n]``.

    ``sum_i (x_i - mean_i) * components[j][i]``, summed left to right in float64, then
    rounded to float32 once.
    """
    centred = [x - float(m) for x, m in zip(scaled, pca["mean"], strict=True)]
    n = len(centred[0]) if centred else 0
    out = np.empty((len(pca["components"]), n), dtype=np.float32)
    for j, weights in enumerate(pca["components"]):
        total = centred[0] * float(weights[0])
        for x, w in zip(centred[1:], weights[1:], strict=True):
            total = total + x * float(w)
        out[j] = total.astype(np.float32)
    return out


def _ids(values: pa.Array, spec: Mapping[str, Any]) -> np.ndarray:
    """Ids of present values (vocabulary position + 2, unseen 1, or hashed); nulls left to the caller.

    A dictionary array (a Parquet column read with ``read_dictionary``) is encoded once
    per dictionary entry, and each row takes its entry's id: no per-row hashing or look-up.
    """
    if pa.types.is_dictionary(values.type):
        entries, indices = values.dictionary, values.indices
        if indices.null_count:  # a null takes the id a plain null value gets: one more entry
            indices = indices.fill_null(len(entries))
            entries = pa.concat_arrays([entries, pa.nulls(1, entries.type)])
        return _ids(entries, spec)[indices.to_numpy()]
    if spec["encoding"] == "vocab":
        position = pc.index_in(values, value_set=pa.array(spec["vocabulary"], pa.string()))
        return pc.fill_null(pc.add(position, 2), UNSEEN_ID).to_numpy(zero_copy_only=False).astype(np.int32)
    values_distinct, index = distinct(values)
    return hashed_ids(spark_xxhash64(values_distinct.to_pylist()), spec["buckets"])[index]


def _strings(values: Any, where: str) -> pa.Array:
    array = as_array(values)
    if pa.types.is_null(array.type):
        return array.cast(pa.string())
    kind = array.type.value_type if pa.types.is_dictionary(array.type) else array.type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise TransformError(f"{where}: a prepared {array.type} column; expected strings")
    return array


def encode_categorical(values: Any, spec: Mapping[str, Any]) -> np.ndarray:
    """A categorical feature from its prepared strings: int32 ids, 0 where missing."""
    strings = _strings(values, f"categorical {spec['name']!r}")
    ids = _ids(strings, spec)
    missing = strings.is_null().to_numpy(zero_copy_only=False)
    return np.where(missing, MISSING_ID, ids).astype(np.int32)


def encode_tokens(values: Any, spec: Mapping[str, Any]) -> np.ndarray:
    """A text feature from its token lists: int32 ``[n, max_tokens]``, cut or 0-padded."""
    tokens = as_array(values)
    where = f"text {spec['name']!r}"
    if pa.types.is_null(tokens.type):
        tokens = tokens.cast(pa.list_(pa.string()))
    if not (pa.types.is_list(tokens.type) or pa.types.is_large_list(tokens.type)):
        raise TransformError(f"{where}: a prepared {tokens.type} column; expected lists of tokens")
    n, width = len(tokens), int(spec["max_tokens"])
    # The offsets of this (maybe sliced) array's lists, n + 1 of them; a null list counts as
    # empty whatever its offsets span (ListArray.flatten skips it too).
    offsets = tokens.offsets.to_numpy().astype(np.intp, copy=False)
    lengths = np.diff(offsets)
    if tokens.null_count:
        lengths[tokens.is_null().to_numpy(zero_copy_only=False)] = 0
    first = int(offsets[0]) if n else 0
    values = tokens.values.slice(first, int(offsets[-1]) - first if n else 0)
    flat = _strings(values, where)
    if not len(flat) or not lengths.any():
        return np.full((n, width), PADDING_ID, dtype=np.int32)
    # Each token's id once (per dictionary entry for a dictionary array), then each of the
    # max_tokens positions gathers its rows' token ids, or the padding id appended past the
    # end: a few vectorised takes, no per-token row and position arrays.
    ids = np.concatenate([_ids(flat, spec).astype(np.int32, copy=False), np.array([PADDING_ID], np.int32)])
    starts = offsets[:-1] - first
    out = np.empty((n, width), dtype=np.int32)
    for position in range(width):
        out[:, position] = ids[np.where(lengths > position, starts + position, len(flat))]
    return out


# ------------------------------------------------------------------- subword tokens


def subword_entries(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The text entries of ``doc`` encoded by a tokenizer file."""
    return [spec for spec in doc["text"] if spec["encoding"] == SUBWORD]


def with_tokenizers(doc: Mapping[str, Any], read_bytes: Callable[[str], bytes], where: str) -> dict[str, Any]:
    """``doc`` with each tokenizer file's text in its entry (``tokenizer_file.content``).

    The files lie beside ``transform.json`` under the names the entries give; ``read_bytes``
    reads one by that name. Each is checked against the sha256 the fit recorded, so a
    model folder or export can only serve with the tokenizer it was fitted with.

    :raises TransformError: a file missing, unreadable, or with another sha256.
    """
    out = copy.deepcopy(dict(doc))
    for spec in subword_entries(out):
        ref = spec["tokenizer_file"]
        try:
            data = read_bytes(ref["file"])
        except OSError as err:
            raise TransformError(
                f"{where}: text {spec['name']!r}: cannot read its tokenizer file {ref['file']!r} "
                f"(it lies beside transform.json): {err}"
            ) from err
        digest = hashlib.sha256(data).hexdigest()
        if digest != ref["sha256"]:
            raise TransformError(
                f"{where}: text {spec['name']!r}: {ref['file']} has sha256 {digest}, the transform "
                f"recorded {ref['sha256']}; copy the tokenizer file the transform was fitted with"
            )
        ref["content"] = data.decode("utf-8")
    return out


def tokenizer_files(doc: Mapping[str, Any]) -> dict[str, bytes]:
    """File name -> bytes of each tokenizer a loaded ``doc`` carries (to copy beside it)."""
    return {spec["tokenizer_file"]["file"]: _content(spec).encode("utf-8") for spec in subword_entries(doc)}


def _content(spec: Mapping[str, Any]) -> str:
    content = spec["tokenizer_file"].get("content")
    if content is None:
        raise TransformError(
            f"text {spec['name']!r}: the tokenizer file {spec['tokenizer_file']['file']!r} is not loaded; "
            "read the transform with its tokenizer files (lakeprep_contracts.encode.with_tokenizers)"
        )
    return content


@functools.lru_cache(maxsize=16)
def load_tokenizer(content: str, max_tokens: int) -> Tokenizer:
    """The tokenizer of a file's text, cutting at ``max_tokens`` (special tokens included).

    Cached per (file, length): parsing a large vocabulary once per process, not per batch.
    Padding is left off: :func:`encode_subwords` pads, with the entry's ``padding_id``.
    """
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(content)
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_tokens, stride=0, strategy="longest_first")
    return tokenizer


def tokenizer_facts(data: bytes, where: str) -> dict[str, Any]:
    """What the fit records of a tokenizer file: sha256, vocabulary size and padding id.

    :raises TransformError: not a tokenizer file, or no padding token with id 0 (the
        reference model's bag of embeddings takes id 0 as padding, docs/TRANSFORM.md).
    """
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as err:  # UnicodeDecodeError, or the plain Exception tokenizers raises
        raise TransformError(f"{where}: not a Hugging Face tokenizer file (tokenizer.json): {err}") from err
    padding = tokenizer.padding
    pad_id = padding["pad_id"] if padding else None
    if pad_id is None:
        pad_id = next(
            (tokenizer.token_to_id(t) for t in PAD_TOKENS if tokenizer.token_to_id(t) is not None), None
        )
    if pad_id != 0:
        raise TransformError(
            f"{where}: the tokenizer's padding token has id {pad_id!r}; lakeprep pads with id 0 "
            f"(a token named one of {list(PAD_TOKENS)} or the file's padding.pad_id must be 0): "
            "use a tokenizer whose padding id is 0 (BERT-style WordPiece files are)"
        )
    return {
        "sha256": hashlib.sha256(data).hexdigest(),
        "vocab_size": tokenizer.get_vocab_size(with_added_tokens=True),
        "padding_id": 0,
    }


PAD_TOKENS = ("[PAD]", "<pad>")


def _subword_texts(values: Any, where: str) -> tuple[list[str], np.ndarray]:
    """(distinct texts, index of each row's text); null is the empty text."""
    strings = _strings(values, where)
    if pa.types.is_dictionary(strings.type):
        strings = strings.cast(strings.type.value_type)
    unique, index = distinct(pc.fill_null(strings, ""))
    return [t or "" for t in unique.to_pylist()], index


def encode_subwords(values: Any, spec: Mapping[str, Any]) -> np.ndarray:
    """A text feature from its cleaned texts by its tokenizer file: int32 ``[n, max_tokens]``.

    The tokenizer's ids with its special tokens (e.g. ``[CLS] ... [SEP]``), cut to
    ``max_tokens`` by the tokenizer's own truncation, then padded with ``padding_id``
    (0). Each distinct text is tokenized once (``encode_batch``, in Rust threads).
    """
    ids, _ = _subword_ids(values, spec)
    return ids


def attention_mask(ids: np.ndarray, spec: Mapping[str, Any]) -> np.ndarray:
    """1 where ``ids`` (:func:`encode_subwords`) hold a token, 0 at padding: uint8, same shape."""
    return (ids != int(spec["padding_id"])).astype(np.uint8)


def truncation(values: Any, spec: Mapping[str, Any]) -> dict[str, int]:
    """``{rows_truncated, tokens_cut}`` of these texts at ``max_tokens`` (special tokens not counted)."""
    _, cut = _subword_ids(values, spec)
    return {"rows_truncated": int(np.count_nonzero(cut)), "tokens_cut": int(cut.sum())}


def _subword_ids(values: Any, spec: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    width = int(spec["max_tokens"])
    texts, index = _subword_texts(values, f"text {spec['name']!r}")
    tokenizer = load_tokenizer(_content(spec), width)
    encodings = tokenizer.encode_batch(texts) if texts else []
    table = np.full((len(texts) + 1, width), int(spec["padding_id"]), dtype=np.int32)
    cut = np.zeros(len(texts) + 1, dtype=np.int64)
    for i, e in enumerate(encodings):
        table[i, : len(e.ids)] = e.ids
        # Overflowing pieces repeat the special tokens; only the text's own tokens were cut.
        cut[i] = sum(len(o.ids) - sum(o.special_tokens_mask) for o in e.overflowing)
    return table[index], cut[index]


# ------------------------------------------------------------------------ whole rows


def outputs(doc: Mapping[str, Any]) -> list[str]:
    """The encoded column names the transform produces, in document order."""
    return [spec["output"] for role in ROLES for spec in doc[role]]


def input_columns(doc: Mapping[str, Any]) -> list[str]:
    """The prepared columns the transform reads (PCA's inputs included), in document order."""
    names: list[str] = []
    for role in ROLES:
        for spec in doc[role]:
            inputs = doc["pca"]["inputs"] if "pca_component" in spec else [spec]
            names += [s["name"] for s in inputs if s["name"] not in names]
    return names


def arrow_type(role: str) -> pa.DataType:
    """The Arrow type of a role's encoded column (the shard's)."""
    return {"numeric": pa.float32(), "categorical": pa.int32(), "text": pa.list_(pa.int32())}[role]


def encode(columns: Mapping[str, Any], doc: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Every feature of ``doc`` from the prepared ``columns`` (name -> array): output -> numpy.

    :raises TransformError: naming the feature whose column is missing or has a type
        its role cannot take, or a column whose length differs from the others.
    """
    prepared = {name: as_array(values) for name, values in columns.items()}
    lengths = {len(v) for v in prepared.values()}
    if len(lengths) > 1:
        raise TransformError(f"columns have different lengths {sorted(lengths)}")
    n = lengths.pop() if lengths else 0

    def column(role: str, spec: Mapping[str, Any], what: str = "") -> pa.Array:
        name = spec["name"]
        if name not in prepared:
            raise TransformError(
                f"{role} feature {name!r} ({what}{spec['output']}) is not among the columns "
                f"{sorted(prepared)}"
            )
        return prepared[name]

    out: dict[str, np.ndarray] = {}
    projected = None
    for spec in doc["numeric"]:
        if "pca_component" in spec:  # a principal component of doc["pca"]'s inputs
            if projected is None:
                inputs = doc["pca"]["inputs"]
                scaled = [
                    scale_numeric(
                        numbers(column("numeric", s, "PCA input "), where=f"numeric {s['name']!r}"), s
                    )
                    for s in inputs
                ]
                projected = project_pca(scaled, doc["pca"])
            out[spec["output"]] = projected[spec["pca_component"] - 1]
        else:
            values = numbers(column("numeric", spec), where=f"numeric {spec['name']!r}")
            out[spec["output"]] = encode_numeric(values, spec)
    for spec in doc["categorical"]:
        out[spec["output"]] = encode_categorical(column("categorical", spec), spec)
    for spec in doc["text"]:
        if spec["encoding"] == SUBWORD:
            out[spec["output"]] = encode_subwords(column("text", spec), spec)
        else:
            out[spec["output"]] = encode_tokens(column("text", spec), spec)
    for name, values in out.items():
        if len(values) != n:
            raise TransformError(f"{name} has {len(values)} rows, expected {n}")
    return out


def encode_batch(batch: pa.RecordBatch, doc: Mapping[str, Any], keep: Sequence[str] = ()) -> pa.RecordBatch:
    """One record batch of prepared rows to its encoded columns, with ``keep`` passed through first."""
    columns = {name: batch.column(name) for name in batch.schema.names}
    encoded = encode(columns, doc)
    arrays: list[pa.Array] = [batch.column(name) for name in keep]
    names = list(keep)
    for role in ROLES:
        for spec in doc[role]:
            values = encoded[spec["output"]]
            if role == "text":
                width = values.shape[1]
                offsets = np.arange(0, (len(values) + 1) * width, width, dtype=np.int32)
                array = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values.reshape(-1)))
            else:
                array = pa.array(values)
            arrays.append(array)
            names.append(spec["output"])
    return pa.RecordBatch.from_arrays(arrays, names=names)


def encode_batches(
    batches: Iterable[pa.RecordBatch], doc: Mapping[str, Any], keep: Sequence[str] = ()
) -> Iterator[pa.RecordBatch]:
    """:func:`encode_batch` over a stream of batches (what ``mapInArrow`` calls)."""
    for batch in batches:
        yield encode_batch(batch, doc, keep)
