"""Data: turning the world into numbers (chapter 1).

Everything here works offline.  The text corpus is the Python standard
library's own source code, which every Python installation carries; the
images are the two photos scikit-learn ships; the small labelled data set is
scikit-learn's 8x8 handwritten digits.  One module per topic, in the chapter's
order; every name is also importable from ``gputrain.data`` itself:

- :mod:`gputrain.data.corpus`: files, text, exact de-duplication, deterministic splits
- :mod:`gputrain.data.images`: photo -> (C, H, W) tensor, resize, normalisation, batch augmentation
- :mod:`gputrain.data.tokenizer`: the byte tokenizer and a byte-level BPE trained from scratch
- :mod:`gputrain.data.loaders`: token datasets and loaders that yield shifted (x, y) pairs, and
  a loader's throughput measured against a model's step time
- :mod:`gputrain.data.order`: digits in shuffled or class-sorted order, and training in that order
"""

from .corpus import (  # noqa: F401
    stdlib_files, read_text_files, python_corpus, DedupReport, dedup_exact, split_indices,
    sample_text,
)
from .images import (  # noqa: F401
    sample_image_files, to_tensor, sample_image, decode_jpeg, resize, resize_shorter, center_crop,
    minmax, channel_stats, standardize, random_flip, random_crop, rotate, random_rotation, augment,
)
from .tokenizer import (  # noqa: F401
    ByteTokenizer, SPLIT_PATTERN, BPE_FORMAT, BPETokenizer, bytes_per_token,
)
from .loaders import (  # noqa: F401
    TokenDataset, split_tokens, make_loader, token_loader, infinite, JpegImages, LoaderStats,
    loader_throughput,
)
from .order import (  # noqa: F401
    digits, order_by, per_class_accuracy, OrderedRun, train_in_order,
)

