"""Kernel data handed to a run (`%%skill run --with df,fig,notes`): each object written into the run's inputs folder
in a format made for it, described to the model by name, type, shape and path, images also sent as image blocks.

Scripts find the files in the working folder (under `.skills/inputs/`) and through `$SKILLS_MAGIC_INPUTS`. Types are
recognised by duck typing, so pandas, numpy, matplotlib and Pillow are never imported here: an object that has
them already has its library loaded.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from skills_magic.errors import SkillsMagicError
from skills_magic.safety.gate import INPUTS_VARIABLE
from skills_magic.safety.skill_scan import digest as file_digest

INPUTS_FOLDER = os.path.join(".skills", "inputs")  # one folder a run under the working folder: scripts see it
MAX_IMAGE_BYTES = 5 * 1024 * 1024  # the Messages API's limit for one base64 image
MAX_INPUT_BYTES = 256 * 1024 * 1024  # one input written; bigger is almost surely the wrong object
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class InputError(SkillsMagicError):
    """A kernel object that cannot be handed to a run (no such name, or a type with no file format here)."""


@dataclass(frozen=True)
class KernelInput:
    """One object handed to a run, as written."""

    name: str
    kind: str  # DataFrame, ndarray, str, bytes, JSON, figure, image
    type_name: str  # the object's own type, e.g. pandas.DataFrame
    shape: str  # "3 rows x 2 columns", "(10, 4)", "1,204 characters", "640x480 pixels"
    path: str  # absolute
    bytes: int
    media_type: str | None = None  # image/png for images: also sent to the model as an image block

    def line(self, shown_path: str) -> str:
        return f"- {self.name}: {self.type_name} ({self.kind}), {self.shape}, at {shown_path}"


def _type_name(value: Any) -> str:
    kind = type(value)
    module = kind.__module__.split(".")[0]
    return kind.__name__ if module == "builtins" else f"{module}.{kind.__name__}"


def _is(value: Any, module: str, *attributes: str) -> bool:
    return type(value).__module__.split(".")[0] == module and all(hasattr(value, a) for a in attributes)


def _parquet_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


def _write_one(name: str, value: Any, folder: str) -> KernelInput:
    """The file for one object, in the format its type calls for."""
    base = os.path.join(folder, name)
    if _is(value, "pandas", "to_csv", "shape"):
        frame = value.to_frame() if hasattr(value, "to_frame") and not hasattr(value, "columns") else value
        if _parquet_available():
            path = base + ".parquet"
            frame.to_parquet(path)
        else:
            path = base + ".csv"
            frame.to_csv(path, index=type(frame.index).__name__ != "RangeIndex")  # a 0, 1, 2 ... index is no data
        rows, columns = frame.shape
        return _made(name, value, "DataFrame", f"{rows:,} rows x {columns:,} columns ({', '.join(map(str, frame.columns[:20]))})", path)
    if _is(value, "numpy", "shape", "dtype"):
        import numpy

        path = base + ".npy"
        numpy.save(path, value, allow_pickle=False)
        return _made(name, value, "ndarray", f"shape {tuple(value.shape)}, dtype {value.dtype}", path)
    if _is(value, "matplotlib", "savefig"):
        path = base + ".png"
        value.savefig(path, format="png")
        return _image(name, value, "figure", path)
    if _is(value, "PIL", "save", "size", "mode"):
        path = base + ".png"
        value.save(path, format="PNG")
        return _image(name, value, "image", path)
    if isinstance(value, str):
        path = base + ".txt"
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(value)
        return _made(name, value, "str", f"{len(value):,} characters", path)
    if isinstance(value, (bytes, bytearray, memoryview)):
        path = base + ".bin"
        with open(path, "wb") as handle:
            handle.write(bytes(value))
        return _made(name, value, "bytes", f"{len(value):,} bytes", path)
    if isinstance(value, (dict, list, tuple)):
        try:
            text = json.dumps(value, ensure_ascii=False, indent=1, default=_refuse)
        except (TypeError, ValueError) as error:
            raise InputError(f"--with {name}: a {_type_name(value)} that is not JSON ({error})") from None
        path = base + ".json"
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return _made(name, value, "JSON", f"{len(value):,} {'keys' if isinstance(value, dict) else 'items'}", path)
    raise InputError(f"--with {name}: a {_type_name(value)} has no file format here; hand a DataFrame, a numpy array, "
                     "str, bytes, a dict or list (JSON), a matplotlib figure or a PIL image")


def _refuse(value: Any) -> Any:
    raise TypeError(f"{_type_name(value)} is not JSON serializable")


def _made(name: str, value: Any, kind: str, shape: str, path: str, media_type: str | None = None) -> KernelInput:
    size = os.path.getsize(path)
    if size > MAX_INPUT_BYTES:
        os.unlink(path)
        raise InputError(f"--with {name}: {size:,} bytes written, more than the {MAX_INPUT_BYTES:,} a run takes")
    return KernelInput(name, kind, _type_name(value), shape, path, size, media_type)


def _image(name: str, value: Any, kind: str, path: str) -> KernelInput:
    from struct import unpack

    with open(path, "rb") as handle:
        head = handle.read(24)
    width, height = unpack(">II", head[16:24]) if head[:8] == b"\x89PNG\r\n\x1a\n" else (0, 0)
    return _made(name, value, kind, f"{width}x{height} pixels, PNG", path, "image/png")


def write_inputs(values: Mapping[str, Any], working_folder: str) -> tuple[str, list[KernelInput]]:
    """(the inputs folder, what was written): each named object as a file of a folder under INPUTS_FOLDER named by
    the digest of what it holds, so the same data gets the same paths on every Restart & Run All."""
    for name in values:
        if not NAME.match(name):
            raise InputError(f"--with {name!r}: a name is a Python identifier (letters, digits, _)")
    root = os.path.join(working_folder, INPUTS_FOLDER)
    os.makedirs(root, exist_ok=True)
    writing = tempfile.mkdtemp(prefix=".writing-", dir=root)
    try:
        written = [_write_one(name, value, writing) for name, value in values.items()]
        digest = hashlib.sha256()
        for item in written:  # each file hashed in blocks as it is read back: an input may be large
            digest.update(f"{item.name}\0{file_digest(item.path)}\n".encode())
        folder = os.path.join(root, f"in-{digest.hexdigest()[:12]}")
        if os.path.isdir(folder):  # the same data handed before: its files are these bytes already
            shutil.rmtree(writing)
        else:
            os.chmod(writing, 0o755)
            os.rename(writing, folder)
    except BaseException:
        shutil.rmtree(writing, ignore_errors=True)
        raise
    return folder, [dataclasses.replace(i, path=os.path.join(folder, os.path.basename(i.path))) for i in written]


def prepare(task: str, values: Mapping[str, Any], working_folder: str):
    """(what the model's first turn holds, the inputs folder or None, what was written): with no values, the task."""
    if not values:
        return task, None, []
    folder, written = write_inputs(values, working_folder)
    return task_blocks(task, written, folder, working_folder), folder, written


def described(inputs: list[KernelInput], folder: str, working_folder: str) -> str:
    """What the model is told of the inputs: name, type, shape and where a script finds each."""
    relative = os.path.relpath(folder, working_folder)
    lines = [f"The notebook handed this run {len(inputs)} input{'s' if len(inputs) != 1 else ''}, as files in the "
             f"working folder under {relative}/ (scripts also find that folder in ${INPUTS_VARIABLE}):"]
    lines += [i.line(os.path.relpath(i.path, working_folder)) for i in inputs]
    return "\n".join(lines)


def task_blocks(task: str, inputs: list[KernelInput], folder: str, working_folder: str) -> list[dict[str, Any]]:
    """The first user turn's content: the inputs described, each image as an image block, then the task."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": described(inputs, folder, working_folder)}]
    for item in inputs:
        if item.media_type and item.bytes <= MAX_IMAGE_BYTES:
            with open(item.path, "rb") as handle:
                data = base64.b64encode(handle.read()).decode("ascii")
            blocks.append({"type": "text", "text": f"{item.name}:"})
            blocks.append({"type": "image", "source": {"type": "base64", "media_type": item.media_type, "data": data}})
    blocks.append({"type": "text", "text": task})
    return blocks
