"""What cProfile says about a sample: the time of __getitem__ (or of the dataset's iterator) split by its direct
callees, each named by what it is and the library it lives in, and the whole profile's time by library.

cProfile (the standard library's, kept with CPython) records each call into and out of a function, so a profiled
sample runs slower than a plain one; the split is used for its proportions only, laid over the time measured without
the profiler (trial/stage_split.py), and the profiler's overhead is reported beside it. Callees through which a
timing hook is reached (a Compose of hooked steps, the hooked loader) are left out: the hooks time those.
"""

from __future__ import annotations

import cProfile
import os
import re
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# (pattern over "module.qualname", kind): the first match names the stage's kind; everything else is a "call".
# Hugging Face streaming reads Arrow record batches (`_iter_arrow`), then its formatter turns each row into tensors
# (decoding Image or Audio features on the way): those two are its read and its decode.
KIND_RULES: tuple[tuple[str, str], ...] = (
    (r"^datasets\.formatting\.|^datasets\.features\..*decode", "decode"),
    (r"^datasets\.iterable_dataset\..*(_iter_arrow|ExamplesIterable\.__iter__)$|^datasets\.arrow_reader\.", "read"),
    (r"^pyarrow\.", "read"),
    (r"^tokenizers\.", "tokenize"),
    (r"^PIL\.Image\.(open|Image\.convert|Image\.load)$|^PIL\.ImageFile\.ImageFile\.load$", "read+decode"),
    (r"^soundfile\.(read|SoundFile\.read)$|^librosa\..*\.load$|^torchaudio\..*load$", "read+decode"),
    (r"^torchvision\.io\..*read_|^cv2\.imread$|^imageio\.", "read+decode"),
    (r"decode", "decode"),
    (
        r"^webdataset\.|^tarfile\.|^io\.open$|^builtins\.open$|\.read$|^numpy\.lib\..*load$|^torch\.serialization",
        "read",
    ),
)
# What a known library's read or decode is, for its stage's name (the dotted name follows in the note).
LABELS: tuple[tuple[str, str], ...] = (
    (r"^datasets\.formatting\.", "Arrow rows to tensors, datasets"),
    (r"^datasets\.iterable_dataset\.", "Arrow batches, datasets"),
    (r"^webdataset\.", "tar shards, webdataset"),
)
MAX_DESCENT = 4  # a wrapper's __getitem__ (Subset) holding nearly all the time is looked through, this deep
DESCEND_SHARE = 0.9
_BUILTIN = re.compile(r"^<built-in method ([\w.]+)>$")
_METHOD = re.compile(r"^<method '(\w+)' of '([\w.]+)' objects>$")
_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"])


@dataclass(frozen=True)
class Call:
    """A direct callee of the profiled entry (or the entry's own code), its profiled wall and CPU seconds."""

    name: str
    kind: str
    library: str
    wall_s: float
    cpu_s: float


@dataclass(frozen=True)
class Split:
    entry: str  # the function whose callees these are: "ImageFolder.__getitem__"
    calls: tuple[Call, ...]  # largest first; the entry's own code among them
    libraries: tuple[tuple[str, float], ...]  # (library, share of the profiled time), largest first


def _stdlib(top: str) -> bool:
    bare = top.lstrip("_")
    return bare in sys.stdlib_module_names or f"_{bare}" in sys.stdlib_module_names


def module_of(filename: str) -> tuple[str, str]:
    """(dotted module, library) of a source file: a library is a top-level package, "stdlib", or the user's own
    top-level module (a file outside site-packages)."""
    if filename.startswith("<frozen "):
        return filename[len("<frozen ") : -1], "stdlib"
    path = os.path.realpath(filename)
    roots = sorted((os.path.realpath(p) for p in sys.path if p), key=len, reverse=True)
    root = next((r for r in roots if path.startswith(r + os.sep)), None)
    if root is None:
        return os.path.splitext(os.path.basename(path))[0], "user"
    parts = os.path.splitext(os.path.relpath(path, root))[0].split(os.sep)
    if parts[-1] == "__init__":
        parts.pop()
    module = ".".join(parts)
    third_party = "site-packages" in root or "dist-packages" in root
    return module, "stdlib" if root == _STDLIB and not third_party else parts[0]


def describe(key: Any) -> tuple[str, str, bool]:
    """(full dotted name, library, user code?) of a profile entry: a code object or cProfile's label of a
    built-in ("<built-in method torch.log>", "<method 'encode' of 'tokenizers.Tokenizer' objects>"). The library is
    "" for a method of a C type that names no module ("ImagingCore.resize"): Libraries takes its caller's."""
    if hasattr(key, "co_filename"):
        module, library = module_of(key.co_filename)
        qualname = getattr(key, "co_qualname", key.co_name)
        return f"{module}.{qualname}", library, library != "stdlib" and not _third_party(key.co_filename)
    text = str(key)
    if match := _BUILTIN.match(text):
        name = match.group(1)
    elif match := _METHOD.match(text):
        owner = match.group(2).replace("._C.TensorBase", ".Tensor")
        name = f"{owner}.{match.group(1)}"
        if "." not in owner:
            return name, "", False
    else:
        return text.strip("<>"), "", False
    top = name.split(".")[0].lstrip("_") or "builtins"
    return name.lstrip("_"), "stdlib" if _stdlib(top) else top, False


class Libraries:
    """The library of each profiled function; a C method of a type without a module gets its caller's."""

    def __init__(self, stats: dict[Any, Any]) -> None:
        self.callers: dict[Any, list[tuple[float, Any]]] = {}
        for stat in stats.values():
            for sub in stat.calls or ():
                self.callers.setdefault(sub.code, []).append((sub.totaltime, stat.code))

    def __call__(self, key: Any, depth: int = 0) -> str:
        library = describe(key)[1]
        if library or depth >= MAX_DESCENT or not self.callers.get(key):
            return library or "builtins"
        return self(max(self.callers[key], key=lambda pair: pair[0])[1], depth + 1)


def _third_party(filename: str) -> bool:
    return "site-packages" in filename or "dist-packages" in filename


def short_name(key: Any) -> str:
    """What a stage is called: a library's function by its dotted name (torch.functional.stft), the user's own by
    its qualified name (LogMel.__getitem__)."""
    full, _, user = describe(key)
    if user and hasattr(key, "co_filename"):
        return str(getattr(key, "co_qualname", key.co_name))
    return full


def kind_of(key: Any) -> str:
    full, _, _ = describe(key)
    return next((kind for pattern, kind in KIND_RULES if re.search(pattern, full)), "call")


def entries(profile: cProfile.Profile) -> dict[Any, Any]:
    return {entry.code: entry for entry in profile.getstats()}


def reaches(start: Any, targets: set[Any], graph: dict[Any, Any]) -> bool:
    """Whether a call from `start` can lead to one of `targets` (the hooks' code)."""
    stack, seen = [start], set()
    while stack:
        key = stack.pop()
        if key in targets:
            return True
        if key in seen or key not in graph:
            continue
        seen.add(key)
        stack.extend(sub.code for sub in graph[key].calls or ())
    return False


def _looked_through(key: Any) -> bool:
    """A function whose callees stand for it: the user's own, or a wrapper's __getitem__ (torch's Subset)."""
    return hasattr(key, "co_filename") and (describe(key)[2] or key.co_name == "__getitem__")


def find_entry(stats: dict[Any, Any], fetch_code: Any, hooks: set[Any]) -> tuple[Any, list[Any]] | None:
    """The dataset's own entry under our fetch (its __getitem__, its iterator's generator or __next__), looked
    through wrappers that hand nearly all their time to one user function; and those wrappers, passed on the way."""
    fetch = stats.get(fetch_code)
    if fetch is None or not fetch.calls:
        return None
    entry = max(fetch.calls, key=lambda sub: sub.totaltime).code
    passed: list[Any] = []
    for _ in range(MAX_DESCENT):
        stat = stats.get(entry)
        if stat is None or not stat.calls:
            break
        if not hasattr(entry, "co_filename"):  # a built-in on the way: next() resuming the dataset's generator
            passed.append(entry)
            entry = max(stat.calls, key=lambda sub: sub.totaltime).code
            continue
        largest = max(stat.calls, key=lambda sub: sub.totaltime)
        share = largest.totaltime / stat.totaltime if stat.totaltime > 0 else 0.0
        # A wrapper's __getitem__ calling the wrapped dataset's (its own cost inflated by the profiler's, on a small
        # sample), or any function handing nearly all its time to one of the user's own.
        wrapped = _looked_through(largest.code) and largest.code.co_name == "__getitem__" and share >= 0.5
        if largest.code in hooks or not (wrapped or (share >= DESCEND_SHARE and _looked_through(largest.code))):
            break
        passed.append(entry)
        entry = largest.code
    return entry, passed


def callee_libraries(stats: dict[Any, Any], libraries: Libraries, key: Any, own: str) -> list[str]:
    """The libraries a user function spends the most time in, looked for through its own library's functions (a
    method calling a helper calling Pillow: Pillow), two at most."""
    by_library: dict[str, float] = {}
    stack: list[Any] = [key]
    seen: set[Any] = set()
    while stack and len(seen) < 200:
        current = stack.pop()
        if current in seen or current not in stats:
            continue
        seen.add(current)
        for sub in stats[current].calls or ():
            library = libraries(sub.code)
            if library == own:
                stack.append(sub.code)
            elif library != "builtins":
                by_library[library] = by_library.get(library, 0.0) + sub.totaltime
    return [name for name, _ in sorted(by_library.items(), key=lambda kv: -kv[1])[:2]]


def stage_name(stats: dict[Any, Any], libraries: Libraries, key: Any) -> tuple[str, str]:
    """(name, kind) of a direct callee: "read+decode (soundfile.read)", "decode (WebDatasetShards.decode → PIL)",
    a known library's read or decode by what it is: "read (Arrow batches, datasets: ..._iter_arrow)"."""
    kind, name = kind_of(key), short_name(key)
    full, library, user = describe(key)
    label = next((text for pattern, text in LABELS if re.search(pattern, full)), None)
    if label is not None:  # "read (tar shards, webdataset: DataPipeline.iterator)"
        name = f"{label}: {'.'.join(full.split('.')[-2:])}"
    elif user:
        under = callee_libraries(stats, libraries, key, library)
        name += f" → {', '.join(under)}" if under else ""
    return (f"{kind} ({name})" if kind != "call" else name), kind


def _per_callee(stat: Any) -> dict[Any, float]:
    """A profile entry's direct callees and the time each took under it."""
    times: dict[Any, float] = {}
    for sub in (stat.calls or ()) if stat is not None else ():
        times[sub.code] = times.get(sub.code, 0.0) + sub.totaltime
    return times


def split_profile(wall: cProfile.Profile, cpu: cProfile.Profile, fetch_code: Any, hooks: set[Any]) -> Split | None:
    """The entry's direct callees that no hook reaches, and its own code, with their profiled wall and CPU time;
    None when the dataset's entry is not Python code cProfile sees into."""
    stats, cpu_stats = entries(wall), entries(cpu)
    # The entry is found on the CPU clock: a wall clock on a busy machine can charge a preemption to any call.
    found = find_entry(cpu_stats, fetch_code, hooks)
    if found is None or found[0] not in stats:
        return None
    entry, passed = found
    if not hasattr(entry, "co_filename"):  # a built-in's __getitem__ (a list): nothing inside to split
        return None
    libraries = Libraries(stats)
    cpu_by_key = _per_callee(cpu_stats.get(entry))
    groups: dict[str, list[Any]] = {}
    for key, wall_s in _per_callee(stats[entry]).items():
        if reaches(key, hooks, stats):
            continue
        name, kind = stage_name(stats, libraries, key)
        group = groups.setdefault(name, [kind, libraries(key), 0.0, 0.0])
        group[2] += wall_s
        group[3] += cpu_by_key.get(key, 0.0)
    own = [sum(t[k].inlinetime for k in (entry, *passed) if k in t) for t in (stats, cpu_stats)]
    groups[f"{getattr(entry, 'co_qualname', entry.co_name)} (own code)"] = ["own", libraries(entry), *own]
    calls = tuple(sorted((Call(n, k, lib, w, c) for n, (k, lib, w, c) in groups.items()), key=lambda c: -c.wall_s))
    return Split(short_name(entry), calls, library_shares(stats.values(), libraries, {fetch_code, *hooks}))


# C code that may run without the GIL: these libraries release it around their heavy work (torch's ops, Pillow's
# decode and resize, NumPy's array loops, Arrow's reads), and the standard library's waits and reads.
RELEASING = ("torch", "torchvision", "torchaudio", "numpy", "PIL", "pyarrow", "cv2", "tokenizers", "soundfile",
             "scipy", "simplejpeg", "turbojpeg", "decord", "av", "zstandard", "lz4", "zlib")  # fmt: skip
_STDLIB_WAITS = re.compile(r"(^|\.)(sleep|read|readinto|recv\w*|select|poll|wait|acquire|decompress)$")


def gil_share(profile: cProfile.Profile, skip: set[Any]) -> float | None:
    """The share of the profiled CPU time spent holding the GIL: Python code (every function with bytecode) and the
    C functions of libraries not known to release it; the rest is C code of RELEASING libraries (or a standard
    library wait), which may run beside other threads. None when nothing was profiled."""
    stats = entries(profile)
    libraries = Libraries(stats)
    held = free = 0.0
    for key, stat in stats.items():
        if key in skip:
            continue
        if hasattr(key, "co_filename"):
            held += stat.inlinetime
            continue
        name, library = describe(key)[0], libraries(key)
        if library in RELEASING or (library == "stdlib" and _STDLIB_WAITS.search(name)):
            free += stat.inlinetime
        else:
            held += stat.inlinetime
    total = held + free
    return held / total if total > 0 else None


def library_shares(stats: Iterable[Any], libraries: Libraries, skip: set[Any]) -> tuple[tuple[str, float], ...]:
    """Every profiled function's own time, summed by library, as shares of the whole."""
    by_library: dict[str, float] = {}
    for stat in stats:
        if stat.code not in skip:
            library = libraries(stat.code)
            by_library[library] = by_library.get(library, 0.0) + stat.inlinetime
    total = sum(by_library.values())
    if total <= 0:
        return ()
    return tuple((name, t / total) for name, t in sorted(by_library.items(), key=lambda kv: -kv[1]))
