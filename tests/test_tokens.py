"""gputrain.data.tokens and the run's data: the whole file, compact memory-mapped tokens, the cache's life cycle."""

import os
import sys
from pathlib import Path

import pytest
import torch
from helpers import SMALL_GPT, cli_flags

from gputrain.cli import main
from gputrain.data import (
    BPETokenizer,
    ByteTokenizer,
    TextSource,
    TokenDataset,
    python_corpus,
    read_text_files,
    split_tokens,
    token_dtype,
    tokenize_source,
)
from gputrain.data import tokens as tokens_module
from gputrain.model import GPT
from gputrain.train import TrainConfig, build_data, small, train

# text that exercises every rule of read_text_files: CRLF and lone CR line ends, an undecodable byte,
# and characters of 2, 3 and 4 UTF-8 bytes that a byte cap can cut through
AWKWARD = [
    b"line one\r\nline two\rline three\n",
    b"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 bad byte: \xff end\r\n",
    b"",
    b"x = 1\r\n" * 7 + "\u00e9\u20ac".encode() * 5,
]


def _files(tmp_path: Path, contents) -> list[Path]:
    paths = []
    for i, data in enumerate(contents):
        paths.append(tmp_path / f"f{i}.txt")
        paths[-1].write_bytes(data)
    return paths


def test_token_dtype_is_the_smallest_that_holds_the_vocabulary():
    assert token_dtype(256) == torch.uint8 and token_dtype(257) == torch.uint16
    assert token_dtype(65_536) == torch.uint16 and token_dtype(65_537) == torch.int32
    with pytest.raises(ValueError, match="vocab_size"):
        token_dtype(0)


@pytest.mark.parametrize("block", [1, 3, 7, 1 << 20])
def test_streamed_text_equals_read_text_files_at_every_cap(tmp_path, monkeypatch, block):
    monkeypatch.setattr(tokens_module, "BLOCK_BYTES", block)  # CRLF and characters split across blocks
    paths = _files(tmp_path, AWKWARD)
    whole = read_text_files(paths).encode()
    for cap in [None, 1, 9, 10, 11, 34, 35, 36, 37, len(whole) - 1, len(whole), len(whole) + 5]:
        source = TextSource("t", paths, max_bytes=cap)
        got = b"".join(source.blocks())
        assert got == read_text_files(paths, max_bytes=cap).encode(), cap
        assert source.capped == (cap is not None and cap < len(whole)), cap


def _tokenize(source, cache, notes=None, tokenizer=None):
    return tokenize_source(source, tokenizer or ByteTokenizer(), cache, (notes if notes is not None else []).append)


def test_cache_is_reused_and_rebuilt_when_the_file_changes(tmp_path):
    (f,) = _files(tmp_path, [b"def f():\n    return 1\n" * 50])
    cache, notes = tmp_path / "cache", []
    first = _tokenize(TextSource("f", [f]), cache, notes)
    again = _tokenize(TextSource("f", [f]), cache, notes)
    assert (first.status, again.status) == ("built", "reused") and again.path == first.path
    assert torch.equal(again.tokens, first.tokens) and again.tokens.dtype == torch.uint8
    assert bytes(again.tokens.tolist()) == f.read_bytes()

    stat = f.stat()
    f.write_bytes(f.read_bytes().replace(b"return 1", b"return 2"))  # same size ...
    os.utime(f, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # ... and the same mtime: only the hash tells
    edited = _tokenize(TextSource("f", [f]), cache, notes)
    assert edited.status == "rebuilt (the input changed)" and bytes(edited.tokens.tolist()) == f.read_bytes()

    f.write_bytes(f.read_bytes() + b"x = 3\n")  # a new size
    grown = _tokenize(TextSource("f", [f]), cache, notes)
    assert grown.status == "rebuilt (the input changed)" and len(grown.tokens) == len(edited.tokens) + 6
    assert _tokenize(TextSource("f", [f]), cache, notes).status == "reused"
    assert notes == []  # a changed input is not a problem worth a notice
    assert len(list(cache.iterdir())) == 1  # one file per input and cap, replaced in place


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.write_bytes(p.read_bytes()[:-10]),  # cut short
        lambda p: p.write_bytes(p.read_bytes()[:5]),  # hardly anything left
        lambda p: p.write_bytes(b"garbage" * 20),  # not a token file
        lambda p: p.write_bytes(b"\x00" + p.read_bytes()[1:]),  # one token changed: its checksum fails
        lambda p: p.write_bytes(
            p.read_bytes().replace(b'"capped": false', b'"capped": "no!"')
        ),  # metadata of a wrong type
    ],
)
def test_a_damaged_cache_is_rebuilt_with_a_one_line_notice(tmp_path, damage):
    (f,) = _files(tmp_path, [b"import os\n" * 40])
    built = _tokenize(TextSource("f", [f]), tmp_path / "c")
    damage(built.path)
    notes = []
    rebuilt = _tokenize(TextSource("f", [f]), tmp_path / "c", notes)
    assert rebuilt.status == "rebuilt (the cache was damaged)"
    assert len(notes) == 1 and "\n" not in notes[0] and "damaged" in notes[0] and str(built.path) in notes[0]
    assert bytes(rebuilt.tokens.tolist()) == f.read_bytes()
    assert _tokenize(TextSource("f", [f]), tmp_path / "c").status == "reused"


def test_a_bpe_vocabulary_is_cached_as_uint16_and_equals_encoding_the_whole_text(tmp_path, monkeypatch):
    text = python_corpus(max_bytes=30_000)
    bpe = BPETokenizer.train(text, vocab_size=400)
    (f,) = _files(tmp_path, [text.encode()])
    monkeypatch.setattr(tokens_module, "BLOCK_BYTES", 777)  # many blocks: the cuts must not change a token
    cached = _tokenize(TextSource("f", [f]), tmp_path / "c", tokenizer=bpe)
    assert cached.tokens.dtype == torch.uint16 and cached.tokens.tolist() == bpe.encode(text)
    assert cached.path.stat().st_size < 2 * len(cached.tokens) + 4096  # two bytes a token, plus the metadata
    assert _tokenize(TextSource("f", [f]), tmp_path / "c", tokenizer=bpe).status == "reused"
    other = _tokenize(TextSource("f", [f]), tmp_path / "c", tokenizer=bpe.truncated(50))
    assert other.status == "built" and other.path != cached.path  # another tokenizer, another cache file


def test_an_unwritable_cache_keeps_the_tokens_in_memory_with_a_notice(tmp_path):
    (f,) = _files(tmp_path, [b"pass\n" * 30])
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the cache directory would go")
    notes = []
    kept = _tokenize(TextSource("f", [f]), blocker, notes)
    assert kept.status == "in memory" and kept.path is None and kept.tokens.dtype == torch.uint8
    assert bytes(kept.tokens.tolist()) == f.read_bytes() and len(notes) == 1 and "in memory" in notes[0]


def _mappings(path: Path) -> list[tuple[int, int, int]]:
    """(start, end, resident KiB) of each of this process's mappings of ``path`` (/proc/self/smaps)."""
    out = []
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0] if line else ""
        if "-" in head and all(c in "0123456789abcdef-" for c in head):  # a mapping's first line
            start, end = head.split("-")
            out.append([int(start, 16), int(end, 16), 0, line.endswith(str(path))])
        elif line.startswith("Rss:"):
            out[-1][2] = int(line.split()[1])
    return [(a, b, rss) for a, b, rss, ours in out if ours]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_training_windows_come_from_the_cache_file_without_a_copy_or_a_resident_page(tmp_path):
    (f,) = _files(tmp_path, [python_corpus(max_bytes=50_000).encode()])
    cfg = TrainConfig(data=str(f), cache_dir=str(tmp_path / "c"), **SMALL_GPT)
    train_set, val_set = build_data(cfg)
    (cache,) = (tmp_path / "c").iterdir()
    ranges = [(a, b) for a, b, _ in _mappings(cache)]
    for part in (train_set.tokens, val_set.tokens):
        assert part.dtype == torch.uint8  # one byte a token, not eight
        assert any(a <= part.data_ptr() < b for a, b in ranges)  # a view into the mapped file
    assert len(train_set.tokens) + len(val_set.tokens) == 50_000
    assert train_set.file == val_set.file == cache and val_set.first == len(train_set.tokens)
    items = [ds[i] for ds in (train_set, val_set) for i in range(len(ds))]  # every window, pread from the file
    assert sum(rss for _, _, rss in _mappings(cache)) == 0  # not one page of the map was touched
    T = cfg.window
    for ds, offset in ((train_set, 0), (val_set, len(train_set))):
        for i in (0, 1, len(ds) - 1):
            x, y = items[offset + i]
            assert x.dtype == y.dtype == torch.int64 and torch.equal(x[1:], y[:-1])
            mapped = ds.tokens[i * T : i * T + T + 1].long()  # the same window through the map
            assert torch.equal(x, mapped[:-1]) and torch.equal(y, mapped[1:])
    assert sum(rss for _, _, rss in _mappings(cache)) > 0  # which reading through the map does touch


def test_the_whole_file_is_used_unless_capped_and_the_line_says_so(tmp_path):
    text = python_corpus(max_bytes=600_000)  # more than the old 400,000-byte default
    (f,) = _files(tmp_path, [text.encode()])
    lines = []
    shape = dict(**SMALL_GPT, cache_dir=str(tmp_path / "c"))
    train_set, val_set = build_data(TrainConfig(data=str(f), **shape), say=lines.append)
    assert len(train_set.tokens) + len(val_set.tokens) == 600_000
    assert lines[-1].startswith("data: all 600,000 bytes of f0.txt -> 600,000 tokens (uint8, cache built")
    assert "training on 540,000 tokens" in lines[-1] and "validating on 60,000" in lines[-1]
    capped, _ = build_data(TrainConfig(data=str(f), corpus_bytes=100_000, **shape), say=lines.append)
    assert len(capped.tokens) == 90_000
    assert "the first 100,000 bytes of f0.txt (600,000 on disk; capped by corpus_bytes)" in lines[-1]
    build_data(TrainConfig(**shape), say=lines.append)
    assert "the first 400,000 bytes of stdlib" in lines[-1] and "the stdlib default" in lines[-1]


def test_presets_cap_only_the_stdlib():
    assert TrainConfig().corpus_bytes == 0 and small().corpus_bytes == 20_000_000
    assert small(data=__file__).corpus_bytes == 0  # the user's own data: all of it
    with pytest.raises(ValueError, match="corpus_bytes must be >= 0"):
        TrainConfig(corpus_bytes=-1)


def test_compact_tokens_train_bit_for_bit_as_the_int64_corpus_did(tmp_path):
    run = dict(corpus_bytes=40_000, max_steps=6, warmup_steps=2, eval_interval=3, progress=False)
    cfg = TrainConfig(**SMALL_GPT, **run, cache_dir=str(tmp_path / "c"))
    ours = train(cfg)
    old_train, old_val = split_tokens(ByteTokenizer.encode_tensor(python_corpus(max_bytes=40_000)), cfg.val_fraction)
    torch.manual_seed(cfg.seed)
    model = GPT(cfg.model_config())
    theirs = train(
        cfg,
        model=model,
        train_data=TokenDataset(old_train, cfg.window),
        val_data=TokenDataset(old_val, cfg.window),
    )
    assert ours.losses == theirs.losses and ours.val_losses == theirs.val_losses


def test_the_runs_first_line_states_its_data(tmp_path, capsys):
    (f,) = _files(tmp_path, [python_corpus(max_bytes=30_000).encode()])
    flags = cli_flags(**SMALL_GPT, max_steps=2, warmup_steps=0, eval_interval=0, cache_dir=str(tmp_path / "c"))
    assert main(["train", "--data", str(f), *flags]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("data: all 30,000 bytes of f0.txt -> 30,000 tokens (uint8, cache built")
    assert out[-1].startswith("trained 2 steps")


def test_a_uint16_token_file_reads_the_same_windows_as_its_map(tmp_path):
    text = python_corpus(max_bytes=20_000)
    bpe = BPETokenizer.train(text, vocab_size=300)
    (f,) = _files(tmp_path, [text.encode()])
    cached = _tokenize(TextSource("f", [f]), tmp_path / "c", tokenizer=bpe)
    tail = cached.tokens[100:]
    from_file, from_map = TokenDataset(tail, 9, cached.path, first=100), TokenDataset(tail, 9)
    assert from_file.file == cached.path and from_map.file is None
    for i in range(len(from_map)):
        assert all(torch.equal(a, b) for a, b in zip(from_file[i], from_map[i])), i


def test_a_token_file_too_short_or_replaced_is_refused_in_one_line(tmp_path):
    (f,) = _files(tmp_path, [b"pass\n" * 400])
    cached = _tokenize(TextSource("f", [f]), tmp_path / "c")
    with pytest.raises(ValueError, match="holds fewer than the 10000 \\+ 2000 ids to read from it"):
        TokenDataset(cached.tokens, 8, cached.path, first=10_000)  # the wrong file, or the wrong place in it
    import pickle

    ds = TokenDataset(cached.tokens, 8, cached.path)
    copy = pickle.dumps(ds)  # as for a spawned DataLoader worker: without the open file, which it opens itself
    assert torch.equal(pickle.loads(copy)[5][0], ds[5][0])
    replacement = tmp_path / "other"
    replacement.write_bytes(cached.path.read_bytes())
    os.replace(replacement, cached.path)  # what a rebuild of the cache does: a new file renamed into place
    assert torch.equal(ds[3][0], TokenDataset(cached.tokens, 8)[3][0])  # this process keeps the file it opened
    with pytest.raises(RuntimeError, match="was replaced during the run; start the run again"):
        pickle.loads(copy)[0]


def test_a_copy_for_a_worker_maps_the_file_again_and_uint16_ids_survive_pickling(tmp_path):
    """A spawned DataLoader worker gets the dataset pickled (multiprocessing's ForkingPickler): a file-backed one
    used to carry its whole mapped corpus along, and torch 2.13 cannot unpickle a uint16 tensor at all."""
    import pickle
    from multiprocessing.reduction import ForkingPickler

    text = python_corpus(max_bytes=60_000)
    bpe = BPETokenizer.train(text, vocab_size=300)
    (f,) = _files(tmp_path, [text.encode()])
    cached = _tokenize(TextSource("f", [f]), tmp_path / "c", tokenizer=bpe)
    assert cached.tokens.dtype == torch.uint16 and cached.tokens.nbytes > 20_000
    tail = cached.tokens[100:]
    for ds in (TokenDataset(tail, 9, cached.path, first=100), TokenDataset(tail.clone(), 9)):  # file, memory
        for dumps in (pickle.dumps, lambda obj: bytes(ForkingPickler.dumps(obj))):
            blob = dumps(ds)
            copy = pickle.loads(blob)
            assert copy.tokens.dtype == torch.uint16 and len(copy) == len(ds) and copy.file == ds.file
            assert all(torch.equal(a, b) for i in (0, len(ds) // 2, len(ds) - 1) for a, b in zip(copy[i], ds[i]))
            if ds.file is not None:
                assert len(blob) < 2_000, len(blob)  # the file's name, not its ids
    blob = pickle.dumps(TokenDataset(tail, 9, cached.path, first=100))
    cached.path.write_bytes(cached.path.read_bytes()[:1000])  # cut short before a worker maps it
    with pytest.raises(RuntimeError, match="was replaced during the run; start the run again"):
        pickle.loads(blob)
