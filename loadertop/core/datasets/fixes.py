"""What a user can do about a data error: from its one-line text, the fix, and whether a smaller configuration
would avoid it (a resource error) or every configuration meets it (the data itself).

Pure text, no torch: the runner's check and the engine's stop rule (every trial failing the same way) share it.
"""

from __future__ import annotations

import re

# (every needle in the text) -> the fix; the first match wins, so the specific ones come first.
_FIXES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("default_collate", "PIL."), "the samples are PIL images: add a ToTensor() transform (or v2.ToImage() + "
     "v2.ToDtype(torch.float32, scale=True)), or pass a collate_fn that makes tensors"),
    (("default_collate", "NoneType"), "a sample is None: skip missing samples in the dataset, or pass a collate_fn "
     "that drops them"),
    (("default_collate", "found <class"), "default_collate batches only tensors, numpy arrays, numbers, dicts and "
     "lists: return those from the dataset, or pass a collate_fn"),
    (("expected Tensor as element", "but got"), "some samples are not tensors: convert every sample the same way (a "
     "ToTensor() transform), or pass a collate_fn"),
    (("stack expects each tensor to be equal size",), "the samples differ in shape: make them one size (a Resize + "
     "CenterCrop transform), or pass a collate_fn that pads"),
    (("each element in list of batch should be of equal size",), "the samples differ in their number of fields: "
     "return the same structure for every sample"),
    (("cannot identify image file",), "a file is not an image Pillow can read: remove it, or skip unreadable files"),
    (("LibsndfileError",), "a file is not audio soundfile can read: remove or re-encode it, or skip unreadable "
     "files"),
    (("FileNotFoundError",), "a file the dataset reads is missing: check the dataset's root path"),
    (("Can't pickle",), "what the workers receive must pickle: define it at module level, or use --start-method fork"),
    (("cannot pickle",), "what the workers receive must pickle: define it at module level, or use --start-method "
     "fork"),
)  # fmt: skip

# Failures that fewer workers, a smaller batch or more memory would avoid: never the data's own fault.
_RESOURCE = (
    "MemoryError", "out of memory", "Cannot allocate memory", "Too many open files", "No space left",
    "/dev/shm", "shared memory", "killed by signal", "exited unexpectedly", "Bus error",
)  # fmt: skip

# Where describe() (trial/crashes.py) says it happened: a worker's number, a sample index. Not part of the error.
_WHERE = re.compile(r"\s*\((?:in DataLoader worker \d+|sample index |one of \[)[^()]*(?:\([^()]*\)[^()]*)*\)$")


def fix_for(error: str) -> str:
    """The fix for a data error, as one clause ("" when none is known)."""
    for needles, fix in _FIXES:
        if all(needle in error for needle in needles):
            return fix
    return ""


def is_resource(error: str) -> bool:
    return any(word in error for word in _RESOURCE)


def same_error(error: str) -> str:
    """The error without where it happened: trials at 0 and 4 workers that fail on the same data say the same."""
    return _WHERE.sub("", error).strip()


FIRST_BATCH_FAILS = "the dataset's first batch fails"  # the check's words: every trial would fail the same way


def bad_data(error: str, where: str) -> str:
    """One line: what failed, the error, and the fix when one is known."""
    fix = fix_for(error)
    return f"{where}: {error}" + (f"; fix: {fix}" if fix else "")
