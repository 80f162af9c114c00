"""oeq_wheels_build.json: how a binary openequivariance wheel's stable extension was built (in its .dist-info).

The runtime reads it to know which torches the installed OEq serves. Its own schema: its format did not change
when fastmace-oeq-ext's manifest did. Standard library only.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from .manifest import Input, ManifestError, json_object, typed_fields

SCHEMA = 3
READS = (2, 3)   # schema 2 said one cuda_major; 3 says every CUDA major the build serves (cuda_majors)
# The binary openequivariance wheel records its build in its .dist-info under this name.
FILE_NAME = "oeq_wheels_build.json"


@dataclass(frozen=True)
class FileHash:
    path: str        # inside the wheel
    sha256: str


@dataclass(frozen=True)
class OeqBuild:
    package: str                 # openequivariance
    version: str                 # e.g. 0.7.0+oeqwheels.cuda.1
    oeq_sdist: Input
    torch_min: str               # serves every torch of its CUDA majors from this release on
    cuda_majors: tuple[str, ...]  # the CUDA majors of the torches it serves (12 and 13: the dispatch library's)
    built_against: Input         # the oldest supported torch wheel: its stable headers and libraries
    python_tag: str
    platform_tag: str
    files: tuple[FileHash, ...]  # the compiled libraries
    cuda_wheels: tuple[Input, ...]
    nanobind: Input
    compiler: str

    def to_json(self) -> str:
        return json.dumps({"schema": SCHEMA, **asdict(self)}, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "OeqBuild":
        data = json_object(text)
        if data.get("schema") not in READS:
            raise ManifestError(f"schema {data.get('schema')!r}, this runtime reads schema {', '.join(map(str, READS))}")
        if data["schema"] == 2 and isinstance(data.get("cuda_major"), str):  # one CUDA line's build
            data = {**{k: v for k, v in data.items() if k != "cuda_major"}, "cuda_majors": [data["cuda_major"]]}
        return cls(**typed_fields(cls, data, records=(Input, FileHash)))

    def serves(self, torch_version: str | None, torch_cuda: str | None) -> str | None:
        """Why this build cannot serve the installed torch; None when it can."""
        if not torch_version:
            return "torch is not installed"
        try:
            release = tuple(int(x) for x in torch_version.split("+")[0].split(".")[:2])
            floor = tuple(int(x) for x in self.torch_min.split("."))
        except ValueError:
            return f"cannot read torch version {torch_version!r}"
        if release < floor:
            return f"built for torch >= {self.torch_min}, torch {torch_version} installed"
        if (torch_cuda or "").split(".")[0] not in self.cuda_majors:
            return (f"built for CUDA {' and '.join(self.cuda_majors)}, torch {torch_version} is built for CUDA "
                    f"{torch_cuda}")
        return None
