"""Data: turning the world into numbers (chapter 1).

Everything here works offline.  The text corpus is the Python standard
library's own source code, which every Python installation carries; the
images are the two photos scikit-learn ships; the small labelled data set is
scikit-learn's 8x8 handwritten digits.  One module per topic, in the chapter's
order; every name is also importable from ``gputrain.data`` itself:

- :mod:`gputrain.data.corpus`: files, text, exact de-duplication, deterministic splits
- :mod:`gputrain.data.images`: photo -> (C, H, W) tensor, resize, normalisation, batch augmentation
- :mod:`gputrain.data.tokenizer`: the byte tokenizer and a byte-level BPE trained from scratch
- :mod:`gputrain.data.tokens`: a corpus tokenized once into a compact, memory-mapped cache file
- :mod:`gputrain.data.loaders`: token datasets and loaders that yield shifted (x, y) pairs, and
  a loader's throughput measured against a model's step time
- :mod:`gputrain.data.order`: digits in shuffled or class-sorted order, and training in that order
"""

from .corpus import (  # noqa: F401
    DedupReport,
    dedup_exact,
    python_corpus,
    read_text_files,
    sample_text,
    split_indices,
    stdlib_files,
)
from .images import (  # noqa: F401
    augment,
    center_crop,
    channel_stats,
    decode_jpeg,
    minmax,
    random_crop,
    random_flip,
    random_rotation,
    resize,
    resize_shorter,
    rotate,
    sample_image,
    sample_image_files,
    standardize,
    to_tensor,
)
from .loaders import (  # noqa: F401
    JpegImages,
    LoaderStats,
    TokenDataset,
    infinite,
    loader_throughput,
    make_loader,
    split_tokens,
    token_loader,
)
from .order import (  # noqa: F401
    OrderedRun,
    digits,
    order_by,
    per_class_accuracy,
    train_in_order,
)
from .tokenizer import (  # noqa: F401
    BPE_FORMAT,
    SPLIT_PATTERN,
    BPETokenizer,
    ByteTokenizer,
    bytes_per_token,
)
from .tokens import (  # noqa: F401
    TextSource,
    TokenFile,
    default_cache_dir,
    token_dtype,
    tokenize_source,
)
