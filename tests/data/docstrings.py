"""Land a labelled text set in a lake: standard-library docstrings by module family.

    python -m tests.data.docstrings --lake file://$PWD/.lake [--day 2024-02-01 ...]

No labelled text set ships inside a PyPI wheel without a download, so the corpus is the
one every Python carries: the docstring of each public function and class of a few
standard-library modules, labelled by the family its module belongs to (`text`,
`files`, `numbers`, `concurrency`). One CSV per day (`Name`, `Family`, `Doc`; a docstring
keeps its newlines, quoted), object i on day `DAYS[i % len(DAYS)]`, `_SUCCESS` last;
`extra_rows` are appended to a day as given.

A WordPiece tokenizer (Hugging Face `tokenizers`, the file format a model ships with) is
trained on the same docstrings and written to `<lake>/tokenizers/docstrings/tokenizer.json`,
where the spec `tests/data/pipelines/docstrings.yaml` names it. Training is deterministic
(same corpus, same file), so every landing writes the same bytes.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import inspect
import io
import logging
from collections.abc import Iterable, Mapping, Sequence

from lakeprep_airflow import lake_fs

log = logging.getLogger(__name__)

DAYS = ("2024-02-01", "2024-02-02", "2024-02-03")
HEADER = ("Name", "Family", "Doc")
FAMILIES = {
    "text": ("string", "re", "textwrap", "difflib", "html"),
    "files": ("os", "pathlib", "shutil", "glob", "tempfile", "filecmp", "fnmatch"),
    "numbers": ("statistics", "fractions", "random", "decimal"),
    "concurrency": ("threading", "queue", "sched", "concurrent.futures", "selectors"),
}
TOKENIZER_PATH = ("tokenizers", "docstrings", "tokenizer.json")
VOCAB_SIZE = 600
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")  # [PAD] first: lakeprep pads with id 0


def shipped_rows() -> list[list[str]]:
    """`[module.name, family, docstring]` of each public callable a family's modules define.

    Only objects whose `__module__` is the module itself (not what it imports), in name
    order, so the rows are the same on every run of one Python version.
    """
    rows = []
    for family, modules in FAMILIES.items():
        for module_name in modules:
            module = importlib.import_module(module_name)
            for name, obj in sorted(vars(module).items()):
                if (
                    name.startswith("_")
                    or not callable(obj)
                    or getattr(obj, "__module__", None) != module_name
                ):
                    continue
                doc = inspect.getdoc(obj)
                if doc:
                    rows.append([f"{module_name}.{name}", family, doc])
    return rows


def partitions(extra_rows: Mapping[str, Sequence[Sequence[str]]] | None = None) -> dict[str, str]:
    """Day -> that day's CSV text: the header, its docstrings, then its `extra_rows`."""
    days: dict[str, list[Sequence[str]]] = {d: [] for d in DAYS}
    for i, row in enumerate(shipped_rows()):
        days[DAYS[i % len(DAYS)]].append(row)
    for day, rows in (extra_rows or {}).items():
        days[day].extend(rows)
    out = {}
    for day, rows in days.items():
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(HEADER)
        writer.writerows(rows)
        out[day] = buffer.getvalue()
    return out


def train_tokenizer(texts: Iterable[str], vocab_size: int = VOCAB_SIZE) -> bytes:
    """A BERT-style WordPiece tokenizer.json trained on `texts` (lowercased, `[CLS] ... [SEP]`)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS))
    tokenizer.train_from_iterator(list(texts), trainer=trainer)
    tokenizer.post_processor = processors.BertProcessing(
        ("[SEP]", tokenizer.token_to_id("[SEP]")), ("[CLS]", tokenizer.token_to_id("[CLS]"))
    )
    return tokenizer.to_str().encode("utf-8")


def land(
    lake_root: str,
    days: Iterable[str] | None = None,
    *,
    extra_rows: Mapping[str, Sequence[Sequence[str]]] | None = None,
    webhdfs_conn_id: str = "webhdfs_default",
) -> dict[str, int]:
    """Land the given days (default: all) under `<lake>/raw/docstrings/` and the tokenizer
    file; return rows per day."""
    fs, root = lake_fs.resolve(lake_root, webhdfs_conn_id=webhdfs_conn_id)
    available = partitions(extra_rows)
    wanted = list(days) if days is not None else list(available)
    unknown = [d for d in wanted if d not in available]
    if unknown:
        raise ValueError(f"docstrings days are {list(available)}, not {unknown}")
    fs.write_bytes(lake_fs.join(root, *TOKENIZER_PATH), train_tokenizer(doc for _, _, doc in shipped_rows()))
    counts = {}
    for day in wanted:
        path = lake_fs.join(root, "raw", "docstrings", f"dt={day}")
        fs.delete(lake_fs.join(path, "_SUCCESS"))
        fs.write_bytes(lake_fs.join(path, "part-00000.csv"), available[day].encode("utf-8"))
        fs.write_bytes(lake_fs.join(path, "_SUCCESS"), b"")
        counts[day] = len(list(csv.reader(io.StringIO(available[day])))) - 1
    log.info(
        "landed %d docstrings in %d daily partitions under %s", sum(counts.values()), len(counts), lake_root
    )
    return counts


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", required=True, help="lake root URI (file:// or hdfs://)")
    parser.add_argument("--day", action="append", help=f"a day to land (repeatable; default {list(DAYS)})")
    parser.add_argument("--webhdfs-conn-id", default="webhdfs_default")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    counts = land(args.lake, args.day, webhdfs_conn_id=args.webhdfs_conn_id)
    print(f"landed {sum(counts.values())} docstrings in {len(counts)} daily partitions under {args.lake}")


if __name__ == "__main__":
    main()
