"""The variant index (oeq/variants.py) proven with uv itself, as a user runs it.

For each line built for this host, a driver of that line's CUDA presented (`env`: uv's NVIDIA provider override,
NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION; `nvidia-smi`: a stand-in nvidia-smi on PATH that answers the three
queries uv makes), `uv pip install --preview-features wheel-variants torch==X openequivariance==0.7.0
--extra-index-url <site>/variants/simple/` into a fresh venv, every compiler a sentinel before it, must install that
line's variant, and OEq must load it with its operators (installmatrix.run_case and judge). X is a torch of the
line's CUDA: fastmace-oeq-ext's for the release's line, the line's floor for the others.

Then what the others do with the same URL, each a refusal: uv without the preview (a driver presented), uv with no
driver (no variant matches and none is a
fallback: uv 0.13.9 says the release "cannot be used", blaming unsupported variants or, with aarch64's wheels on the
page, the platform tag), and pip, which reads no variant wheel ("invalid wheel filename"): from
the variant index alone it finds no openequivariance at all (with PyPI beside it, it would take PyPI's sdist, which
compiles: the variant index is for uv, README says so).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from .. import pins as pins_mod, proc
from ..errors import OeqWheelsError, UsageError
from ..inputs import pythons
from ..oeq import variants
from ..output import extra_dir
from ..release import site as site_mod
from ..toolchain import host_arch
from . import hosts, sentinels, venvs
from .installmatrix import INSTALL_SENTINELS, Case, run_case, table

DRIVERS = ("env", "nvidia-smi")
FORCE = "NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION"
# The three queries uv's NVIDIA provider makes (uv 0.13: the driver version, `nvidia-smi -q`'s CUDA Version line,
# the compute capability), answered as a driver of CUDA_VERSION does.
NVIDIA_SMI = """#!/bin/sh
case "$*" in
  *driver_version*) echo "{driver}" ;;
  *compute_cap*) echo "9.0" ;;
  *-q*) printf '\\n==============NVSMI LOG==============\\n\\nDriver Version                            : {driver}\\nCUDA Version                              : {cuda}\\n' ;;
  *) exit 2 ;;
esac
"""
DRIVER_OF = {"12": "570.195.03", "13": "580.105.08"}  # a driver of each CUDA major, as nvidia-smi names one
NEWEST_DRIVER = DRIVER_OF["13"]  # for a CUDA major without one here
# uv 0.13.9's refusal when no variant matches: "... has only unsupported wheel variants ..." where every wheel is of
# this platform; with other platforms' wheels on the page (aarch64's), it names a platform tag instead ("has no wheels
# with a matching platform tag"). Either way the release "cannot be used" and nothing is installed.
NO_VARIANT = "cannot be used"
PIP_SKIPS = "from versions: none"


def torch_of(line: pins_mod.OeqLine, pins: pins_mod.Pins) -> str:
    return pins.matrix.torch_version if line.cuda_major == pins.matrix.cuda_major else line.tested_torch[0]


def standin_nvidia_smi(folder: Path, cuda: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text(NVIDIA_SMI.format(driver=DRIVER_OF.get(cuda.split(".")[0], NEWEST_DRIVER), cuda=cuda))
    smi.chmod(0o755)
    return folder


def _driver_here() -> bool:
    """A real NVIDIA driver on this machine: uv would read it, so the no-driver row cannot be run here."""
    return bool(shutil.which("nvidia-smi")) or Path("/proc/driver/nvidia/version").exists()


def _refusal(case: Case, cmd: list[str], env: dict, must_say: str, say) -> Case:
    say(f"{case.label}: {' '.join(Path(cmd[0]).name if i == 0 else c for i, c in enumerate(cmd))}")
    r = proc.run(cmd, env=env, capture_output=True, text=True)
    said = " ".join((r.stderr + r.stdout).split())
    case.ok = r.returncode != 0 and must_say in said
    cause = said.split("cause: ", 1)[-1].split(", we can conclude", 1)[0] if "cause: " in said else said
    case.path = f"refused: {cause[:150]}" if case.ok else f"exit {r.returncode}"
    case.result = "PASS" if case.ok else f"FAIL: expected a refusal saying {must_say!r}: {said[-300:]}"
    return case


def run(outdir: Path, python: str = "3.11", drivers: tuple[str, ...] = DRIVERS, keep: bool = False,
        standins: bool = False, uv_cache: Path | None = None) -> int:
    pins = pins_mod.load()
    bad = [d for d in drivers if d not in DRIVERS]
    if bad or not drivers:
        raise UsageError(f"drivers are presented by {' or '.join(DRIVERS)}, not {', '.join(bad) or 'nothing'}")
    wheels = site_mod.from_outdir(extra_dir(Path(outdir).resolve()), pins)
    lines = [l for l in pins.oeq_lines if l.arch.name == host_arch()]
    built = {l.key for w in wheels if (l := variants.line_of(pins, w.name))}
    missing = [l.key for l in lines if l.key not in built]
    if missing:
        raise UsageError(f"no variant wheel of {', '.join(missing)} in {extra_dir(outdir)}/variants; build first "
                         "(make wheels)")
    base = pythons.find(python).executable
    say = lambda m: print(f"variant-index: {m}", file=sys.stderr, flush=True)
    cases = []
    with tempfile.TemporaryDirectory(prefix="oeq-variant-index-") as tmp_s:
        tmp = Path(tmp_s)
        site = site_mod.write_site(tmp / "site", wheels, pins)
        with hosts.pages(site, pins.repository.split("/")[1]) as root:
            url = f"{root}variants/simple/"
            for line in lines:
                for how in drivers:
                    case = Case(torch_of(line, pins), "uv", line, variant=how)
                    args = [f"torch=={case.torch}", f"openequivariance=={pins.oeq.version}",
                            "--preview-features", "wheel-variants", "--extra-index-url", url]
                    env = {FORCE: line.cuda} if how == "env" else {}
                    smi = standin_nvidia_smi(tmp / f"smi-{line.key}", line.cuda) if how == "nvidia-smi" else None
                    env.update({"UV_CACHE_DIR": str(uv_cache)} if uv_cache else {})
                    run_case(case, pins, args, base, keep, say, False, env, standins, smi)
                    say(f"{case.label}: {case.result}")
                    cases.append(case)
            cases += _others(pins, lines[0], url, base, tmp, say)
    print(table(cases))
    if not all(c.ok for c in cases):
        raise OeqWheelsError(f"{sum(not c.ok for c in cases)} of {len(cases)} variant index cases failed")
    return 0


def _others(pins: pins_mod.Pins, line: pins_mod.OeqLine, url: str, base: str, tmp: Path, say) -> list[Case]:
    """uv with no driver, uv without the preview and pip, each given the variant index: refusals, nothing installed
    or compiled."""
    log = tmp / "sentinel.log"
    sbin = sentinels.make(tmp / "sentinels", log, INSTALL_SENTINELS)
    env = {k: v for k, v in venvs.pip_env().items() if not k.startswith(("UV_", "NV_VARIANT_"))}
    env.update(venvs.index_env(False), PATH=f"{sbin}{os.pathsep}{env['PATH']}", UV_NO_CONFIG="1")
    venv = tmp / "refusals"
    proc.run([base, "-m", "venv", str(venv)], env=env, check=True, capture_output=True)
    vpy = str(venv / "bin" / "python")
    resolve = ["install", "--dry-run", "--no-deps", f"openequivariance=={pins.oeq.version}", "--index-url", url]
    uv = [sys.executable, "-m", "uv", "pip", *resolve, "--python", vpy]
    out = []
    none = Case("", "uv", line, variant="none")
    if _driver_here():
        none.path, none.result, none.ok = "not run", "a driver is present here: uv would read it", True
        out.append(none)
    else:
        out.append(_refusal(none, [*uv, "--preview-features", "wheel-variants"], env, NO_VARIANT, say))
    plain = Case("", "uv", line, variant="no preview")  # the preview off: variant wheels are no candidates
    out.append(_refusal(plain, uv, {**env, FORCE: line.cuda}, NO_VARIANT, say))
    pip = Case("", "pip", line, variant="pip")
    out.append(_refusal(pip, [vpy, "-m", "pip", *resolve], env, PIP_SKIPS, say))
    if log.exists() and log.read_text().strip():
        for c in out:
            c.ok, c.result = False, f"FAIL: a build tool was called: {log.read_text().strip()[:200]}"
    return out
