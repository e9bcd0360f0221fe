"""gputrain.data (chapter 1) against the real thing: Pillow, SciPy, scikit-learn, torch."""

import json
import random
from collections import Counter

import numpy as np
import pytest
import torch

from gputrain import data
from gputrain.device import median_seconds
from gputrain.speed import cpu_threads


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: syncing threads costs more than the arithmetic on CI's two shared cores."""
    with cpu_threads(1):
        yield


@pytest.fixture(scope="module")
def photo():
    return data.sample_image("china.jpg")  # (3, 427, 640) uint8


# --- images ------------------------------------------------------------------


def test_to_tensor_is_channels_first_and_keeps_values(photo):
    from sklearn.datasets import load_sample_images

    hwc = load_sample_images().images[0]
    assert photo.shape == (3, *hwc.shape[:2]) and photo.dtype == torch.uint8
    assert np.array_equal(photo.permute(1, 2, 0).numpy(), hwc)


@pytest.mark.parametrize(
    "shape, hint", [((8, 8), "add a channel axis"), ((2, 8, 8, 3), "torch.stack"), ((8,), "one image")]
)
def test_to_tensor_wrong_dimensions_one_clear_error(shape, hint):
    with pytest.raises(ValueError, match=f"needs 3 dimensions.*{hint}"):
        data.to_tensor(np.zeros(shape, dtype=np.uint8))


def test_augmentation_needs_a_batch(photo):
    with pytest.raises(ValueError, match=r"\(B, C, H, W\).*add a batch axis with x\[None\]"):
        data.random_flip(photo)
    with pytest.raises(ValueError, match="expected an image tensor"):
        data.resize(torch.zeros(5, 5), 3)


def test_resize_matches_pillow_bilinear(photo):
    from PIL import Image

    ours = data.resize(photo, (224, 300))
    pil = Image.fromarray(photo.permute(1, 2, 0).numpy()).resize((300, 224), Image.BILINEAR)
    ref = torch.from_numpy(np.array(pil)).permute(2, 0, 1)
    diff = (ours.int() - ref.int()).abs()
    assert ours.shape == (3, 224, 300) and ours.dtype == torch.uint8
    assert diff.max() <= 1 and diff.float().mean() < 0.25  # rounding differences only


def test_resize_shorter_keeps_aspect_and_center_crop(photo):
    small = data.resize_shorter(photo, 256)
    assert small.shape == (3, 256, round(640 * 256 / 427))
    crop = data.center_crop(small, 224)
    assert crop.shape == (3, 224, 224)
    assert torch.equal(crop, small[:, 16:240, (small.shape[2] - 224) // 2 :][:, :, :224])
    with pytest.raises(ValueError, match="resize first"):
        data.center_crop(photo, 500)


def test_minmax_and_standardize_match_scikit_learn(photo):
    from sklearn.preprocessing import MinMaxScaler, StandardScaler

    pixels = photo.permute(1, 2, 0).reshape(-1, 3).double().numpy()  # (H*W, C): one row per pixel
    mm = data.minmax(photo.double(), dims=(1, 2))
    ref = MinMaxScaler().fit_transform(pixels).reshape(427, 640, 3).transpose(2, 0, 1)
    torch.testing.assert_close(mm, torch.from_numpy(ref).float(), atol=1e-6, rtol=0)

    mean, std = data.channel_stats(photo)
    scaler = StandardScaler().fit(pixels)
    torch.testing.assert_close(mean.double(), torch.from_numpy(scaler.mean_), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(std.double(), torch.from_numpy(scaler.scale_), rtol=1e-5, atol=1e-4)
    z = data.standardize(photo, mean, std)
    ref = scaler.transform(pixels).reshape(427, 640, 3).transpose(2, 0, 1)
    torch.testing.assert_close(z, torch.from_numpy(ref).float(), atol=1e-4, rtol=1e-4)
    assert torch.equal(data.minmax(torch.full((2, 3), 7.0)), torch.zeros(2, 3))  # constant: no 0/0


def test_flip_crop_are_exact_torch_ops():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(6, 3, 20, 24, generator=g)
    assert torch.equal(data.random_flip(x, p=1.0), torch.flip(x, dims=[3]))
    assert torch.equal(data.random_flip(x, p=0.0), x)
    # determinism: the same generator seed gives the same batch
    a = data.augment(x, 16, generator=torch.Generator().manual_seed(3))
    b = data.augment(x, 16, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.shape == (6, 3, 16, 16)
    # every crop is exactly one window of its own image, at the offsets the generator drew
    crops = data.random_crop(x, 9, generator=torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(1)
    tops = (torch.rand(6, generator=g) * (20 - 9 + 1)).long()
    lefts = (torch.rand(6, generator=g) * (24 - 9 + 1)).long()
    for i in range(6):
        assert torch.equal(crops[i], x[i, :, tops[i] : tops[i] + 9, lefts[i] : lefts[i] + 9])
    padded = data.random_crop(x, 20, padding=4, generator=g)
    assert padded.shape == (6, 3, 20, 20)


@pytest.mark.parametrize("degrees, shape", [(30.0, (40, 40)), (-17.0, (40, 40)), (25.0, (20, 30))])
def test_rotation_matches_scipy_inside_the_image(degrees, shape):
    from scipy import ndimage

    x = torch.rand(1, 1, *shape, generator=torch.Generator().manual_seed(0))
    ours = data.rotate(x, degrees)[0, 0].numpy()
    ref = ndimage.rotate(x[0, 0].numpy(), degrees, reshape=False, order=1, mode="constant", cval=0.0)
    h, w = shape
    inner = (slice(h // 4, 3 * h // 4), slice(w // 4, 3 * w // 4))  # borders differ only in edge handling
    np.testing.assert_allclose(ours[inner], ref[inner], atol=1e-5)


def test_rotation_by_90_is_rot90_and_random_rotation_is_bounded():
    x = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(data.rotate(x, 90.0), torch.rot90(x, 1, dims=(2, 3)), atol=1e-5, rtol=0)
    torch.testing.assert_close(data.rotate(x, 0.0), x, atol=1e-6, rtol=0)
    img = (x * 255).to(torch.uint8)
    out = data.random_rotation(img, 10.0, generator=torch.Generator().manual_seed(0))
    assert out.dtype == torch.uint8 and out.shape == img.shape


# --- BPE tokenizer -------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus():
    text = data.python_corpus(max_bytes=160_000)
    return text[:120_000], text[120_000:]


@pytest.fixture(scope="module")
def bpe(corpus):
    return data.BPETokenizer.train(corpus[0], vocab_size=600)


def _random_unicode(rng: random.Random, n: int) -> str:
    pools = [(0x20, 0x7E), (0x4E00, 0x9FFF), (0x1F300, 0x1FAFF), (0x0300, 0x036F), (0x00A0, 0x2FFF), (0, 0x1F)]
    out = []
    for _ in range(n):
        lo, hi = rng.choice(pools)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "def f(x):\n    return x ** 2\n",
        "中文：梯度下降與反向傳播，繁體和简体",
        "emoji 🚀🤖👩‍👩‍👧 and \x00 nul\r\n\ttabs",
        "  many   spaces  \n\n\n",
    ],
)
def test_bpe_round_trip_exact(bpe, text):
    ids = bpe.encode(text)
    assert all(0 <= i < bpe.vocab_size for i in ids)
    assert bpe.decode(ids) == text


def test_bpe_round_trip_random_unicode(bpe):
    rng = random.Random(0)
    for _ in range(50):
        text = _random_unicode(rng, rng.randint(0, 200))
        assert bpe.decode(bpe.encode(text)) == text


def test_bpe_vocab_size_and_determinism(corpus, bpe):
    assert bpe.vocab_size == 600 and len(bpe.vocab) == 600
    assert len(set(bpe.vocab)) == 600  # every token stands for different bytes
    again = data.BPETokenizer.train(corpus[0], vocab_size=600)
    assert again.merges == bpe.merges
    for k, (a, b) in enumerate(bpe.merges):
        assert bpe.vocab[256 + k] == bpe.vocab[a] + bpe.vocab[b]


def _naive_train(text: str, vocab_size: int) -> list[tuple[int, int]]:
    """The textbook algorithm: recount every pair of every chunk occurrence before each merge."""
    tok = data.BPETokenizer()
    words = [list(c.encode("utf-8")) for c in tok.chunks(text)]
    merges = []
    for new in range(256, vocab_size):
        counts = Counter(p for w in words for p in zip(w, w[1:]))
        if not counts:
            break
        pair = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))  # ties: smallest pair
        merges.append(pair)
        words = [data.tokenizer._merge(w, pair, new) for w in words]
    return merges


def test_bpe_fast_training_equals_the_textbook_algorithm(corpus):
    text = corpus[0][:15_000]
    fast = data.BPETokenizer.train(text, vocab_size=330)
    assert fast.merges == _naive_train(text, 330)
    tiny = "aaaa abab aaab"  # overlapping pairs (a, a) and runs out of pairs
    assert data.BPETokenizer.train(tiny, 300).merges == _naive_train(tiny, 300)


def test_bpe_merges_only_shorten_and_prefixes_equal_smaller_training(corpus, bpe):
    held_out = corpus[1][:20_000]
    lengths = [len(bpe.truncated(k).encode(held_out)) for k in range(0, 345, 43)]
    assert lengths[0] == len(held_out.encode("utf-8"))  # no merges: one token per byte
    assert all(b <= a for a, b in zip(lengths, lengths[1:])) and lengths[-1] < lengths[0]
    small = data.BPETokenizer.train(corpus[0], vocab_size=400)
    assert small.merges == bpe.truncated(144).merges


def test_bpe_compresses_held_out_python(corpus, bpe):
    held_out = corpus[1]
    assert data.bytes_per_token(data.ByteTokenizer(), held_out) == 1.0
    assert data.bytes_per_token(bpe, held_out) > 1.8


def test_bpe_save_load_json(tmp_path, bpe, corpus):
    path = tmp_path / "bpe.json"
    bpe.save(path)
    spec = json.loads(path.read_text(encoding="utf-8"))  # plain JSON, not a pickle
    assert spec["format"] == data.BPE_FORMAT and len(spec["merges"]) == 344
    loaded = data.BPETokenizer.load(path)
    assert loaded.merges == bpe.merges and loaded.vocab == bpe.vocab
    text = corpus[1][:5000] + "中文 🚀"
    assert loaded.encode(text) == bpe.encode(text)
    (tmp_path / "bad.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="save it with BPETokenizer.save"):
        data.BPETokenizer.load(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="does not exist yet"):
        data.BPETokenizer([(300, 1)])


@pytest.mark.parametrize(
    "text, vocab, message",
    [
        ("", 512, "empty corpus: pass some text"),
        ("some text", 100, "below 256.*use vocab_size >= 256"),
    ],
)
def test_bpe_bad_input_one_clear_error(text, vocab, message):
    with pytest.raises(ValueError, match=message):
        data.BPETokenizer.train(text, vocab)


# --- de-duplication and splits -------------------------------------------------


def test_dedup_exact_counts_and_keeps_first():
    items = ["a", "b", "a", "c", "b", "a", ""]
    keep, rep = data.dedup_exact(items)
    assert keep == [0, 1, 3, 6]
    assert (rep.n_items, rep.n_unique, rep.n_duplicates) == (7, 4, 3)
    assert rep.duplicate_bytes == 3 and rep.total_bytes == 6
    assert rep.groups == [(3, 0), (2, 1)]
    keep, rep = data.dedup_exact(["  x", "x", "y "], key=str.strip)
    assert keep == [0, 2] and rep.n_duplicates == 1


def test_split_indices_deterministic_disjoint_and_stable():
    keys = [f"file{i}.py" for i in range(2000)]
    for method in ("hash", "permutation"):
        parts = data.split_indices(keys, (0.8, 0.1, 0.1), seed=1, method=method)
        assert parts == data.split_indices(keys, (0.8, 0.1, 0.1), seed=1, method=method)
        flat = sorted(i for p in parts for i in p)
        assert flat == list(range(2000))
        assert [abs(len(p) / 2000 - f) < 0.03 for p, f in zip(parts, (0.8, 0.1, 0.1))] == [True] * 3
        assert parts != data.split_indices(keys, (0.8, 0.1, 0.1), seed=2, method=method)
    # hash split: adding items never moves old ones, and equal keys share a split
    old = data.split_indices(keys, (0.8, 0.1, 0.1), seed=1)
    new = data.split_indices(keys + ["extra.py", "file7.py"], (0.8, 0.1, 0.1), seed=1)
    assert [[i for i in p if i < 2000] for p in new] == old
    assert next(b for b, p in enumerate(new) if 2001 in p) == next(b for b, p in enumerate(old) if 7 in p)
    with pytest.raises(ValueError, match="sum to 1"):
        data.split_indices(keys, (0.8, 0.1))
    with pytest.raises(ValueError, match="'hash' or 'permutation'"):
        data.split_indices(keys, method="random")


# --- loaders -------------------------------------------------------------------


def test_token_loader_yields_shifted_pairs_in_seeded_order():
    tokens = torch.arange(1000)
    batches = list(data.token_loader(tokens, block_size=16, batch_size=8, seed=0))
    x, y = batches[0]
    assert x.shape == y.shape == (8, 16)
    assert torch.equal(y, x + 1)  # the target is the next token everywhere
    again = list(data.token_loader(tokens, block_size=16, batch_size=8, seed=0))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, again))
    assert sum(len(b[0]) for b in batches) == len(data.TokenDataset(tokens, 16))
    ordered = next(iter(data.token_loader(tokens, block_size=16, batch_size=4, shuffle=False)))
    assert torch.equal(ordered[0][:, 0], torch.tensor([0, 16, 32, 48]))


def test_loader_bad_batch_size_one_clear_error():
    ds = data.TokenDataset(torch.arange(100), 8)  # 12 windows
    with pytest.raises(ValueError, match="exceeds the 12 samples.*lower batch_size or set drop_last=False"):
        data.make_loader(ds, batch_size=32, drop_last=True)
    assert len(data.make_loader(ds, batch_size=32, drop_last=False)) == 1
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        data.make_loader(ds, batch_size=0)
    loader = data.make_loader(ds, batch_size=4, pin_memory=True)
    assert loader.pin_memory == torch.cuda.is_available()  # pinning only means something with CUDA


def test_loader_throughput_counts_samples():
    ds = data.TokenDataset(torch.arange(1000), 10)  # 99 windows
    stats = data.loader_throughput(data.make_loader(ds, batch_size=10))
    assert (stats.batches, stats.samples) == (10, 99) and stats.samples_per_s > 0
    assert data.loader_throughput(data.make_loader(ds, batch_size=10), max_batches=3).samples == 30
    x = torch.arange(1000)
    assert median_seconds(lambda: x.sum(), repeats=3, dev=torch.device("cpu")) > 0  # a real op under perf_counter


def test_jpeg_images_decode_to_training_crops():
    jpegs = [p.read_bytes() for p in data.sample_image_files()]
    ds = data.JpegImages(jpegs, length=4, size=64)
    torch.manual_seed(0)
    x, label = ds[1]
    assert x.shape == (3, 64, 64) and x.dtype == torch.uint8 and label == 1
    batch, labels = next(iter(data.make_loader(ds, batch_size=4, shuffle=False)))
    assert batch.shape == (4, 3, 64, 64) and labels.tolist() == [0, 1, 0, 1]
    with pytest.raises(ValueError, match="at least one JPEG"):
        data.JpegImages([], 4)


# --- digits: shuffle or forget -------------------------------------------------


def test_digits_and_orders():
    x, y = data.digits()
    assert x.shape == (1797, 64) and y.shape == (1797,) and float(x.max()) == 16.0
    xs, ys = data.order_by(x, y, "sorted", seed=0, epochs=2)
    assert torch.all(ys[1:] >= ys[:-1]) and Counter(ys.tolist()) == Counter((y.repeat(2)).tolist())
    xh, yh = data.order_by(x, y, "shuffled", seed=0, epochs=2)
    assert Counter(yh[:1797].tolist()) == Counter(y.tolist())  # each pass is one full epoch
    assert torch.equal(yh, data.order_by(x, y, "shuffled", seed=0, epochs=2)[1])
    assert not torch.all(yh[1:] >= yh[:-1]) and not torch.equal(yh[:1797], yh[1797:])
    # rows move with their labels
    for xs_, ys_ in ((xs, ys), (xh, yh)):
        i = int(torch.nonzero((x == xs_[5]).all(1))[0])
        assert y[i] == ys_[5]
    with pytest.raises(ValueError, match="'shuffled' or 'sorted'"):
        data.order_by(x, y, "reversed")
    with pytest.raises(ValueError, match="epochs must be >= 1"):
        data.order_by(x, y, "sorted", epochs=0)


def test_per_class_accuracy_matches_scikit_learn_recall():
    from sklearn.metrics import recall_score

    torch.manual_seed(0)
    x, y = torch.randn(300, 5), torch.randint(0, 4, (300,))
    model = torch.nn.Linear(5, 4)
    ours = data.per_class_accuracy(model, x, y, 4)
    with torch.no_grad():
        pred = model(x).argmax(-1)
    ref = recall_score(y.numpy(), pred.numpy(), average=None, labels=[0, 1, 2, 3], zero_division=0)
    torch.testing.assert_close(ours.double(), torch.from_numpy(ref))


def test_sorted_training_forgets_and_shuffled_does_not():
    x, y = data.digits()
    train, test = data.split_indices([str(i) for i in range(len(y))], (0.75, 0.25), method="permutation")
    x = (x - x[train].mean(0)) / x[train].std(0).clamp_min(0.5)
    finals = {}
    for order in ("sorted", "shuffled"):
        xs, ys = data.order_by(x[train], y[train], order, seed=0, epochs=3)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
        run = data.train_in_order(model, xs, ys, x[test], y[test], lr=0.1, eval_every=20)
        n_steps = (3 * len(train) + 15) // 16
        assert len(run.losses) == n_steps and run.steps[0] == 0 and run.steps[-1] == n_steps
        assert run.accuracy.shape == (len(run.steps), 10)
        finals[order] = run.accuracy[-1]
    assert finals["sorted"][:2].max() < 0.05 and finals["sorted"][9] > 0.95  # the first classes are gone
    assert finals["shuffled"].min() > 0.7 and finals["shuffled"].mean() > 0.9


def test_sample_text_is_seeded_and_bounded():
    docs = [f"doc{i} " * (i + 1) for i in range(50)]
    a, b = data.sample_text(docs, 300, seed=0), data.sample_text(docs, 300, seed=0)
    assert a == b and len(a.encode()) == 300 and a != data.sample_text(docs, 300, seed=1)
    assert data.sample_text(["中文"], 4) == "中"  # never cuts a character in half
    assert data.sample_text(docs, 10**9) != "".join(docs)  # shuffled, yet every document is there
    assert sorted(data.sample_text(docs, 10**9)) == sorted("".join(docs))


@pytest.mark.gpu
def test_gpu_pipeline_bench_writes_its_result(tmp_path):
    import importlib.util
    from pathlib import Path

    from gputrain.results import read_result

    path = Path(__file__).resolve().parents[1] / "bench" / "gpu" / "data_pipeline.py"
    spec = importlib.util.spec_from_file_location("data_pipeline", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--out", str(tmp_path), "--batch", "32", "--images", "128"]) == 0
    result = read_result(tmp_path / "data_pipeline.json")["data"]
    assert result["augment_images_per_s"] > 0 and [r["workers"] for r in result["loader"]][:3] == [0, 4, 8]
