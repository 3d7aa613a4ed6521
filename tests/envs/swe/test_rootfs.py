"""The sandbox holds no copy of a project under test: a `diff` against Debian's
python3-dateutil once showed the gold fix of 7 of 8 dateutil instances."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from envs.swe import swe_rootfs
from envs.swe.projects import PROJECTS_FILE, load_projects
from envs.swe.verify import rootfs_copies

SCRIPT = Path(__file__).parents[3] / "scripts" / "build_rootfs.sh"


def test_the_swe_rootfs_holds_no_copy_of_a_project_under_test():
    rootfs = Path(swe_rootfs())
    if not (rootfs / "bin" / "bash").exists():
        pytest.skip(f"the swe rootfs is not built ({rootfs}); scripts/build_rootfs.sh --flavor swe")
    assert rootfs_copies(rootfs) == []
    assert (rootfs / "usr/lib/python3/dist-packages/_pytest").is_dir()  # the runner is still there


def test_the_build_and_the_check_find_the_same_copies(tmp_path):
    site = tmp_path / "usr/lib/python3/dist-packages"
    local = tmp_path / "usr/local/lib/python3.11/dist-packages"
    for path in (site / "toolz", site / "python_dateutil-2.8.2.egg-info", site / "six.py",
                 local / "cachetools-8.0.1.dist-info", local / "attr"):
        path.mkdir(parents=True) if not path.suffix == ".py" else path.write_text("")
    (site / "parse.py").write_text("")
    expected = ["/usr/lib/python3/dist-packages/parse.py (project parse)",
                "/usr/lib/python3/dist-packages/python_dateutil-2.8.2.egg-info (project python-dateutil)",
                "/usr/lib/python3/dist-packages/toolz (project toolz)",
                "/usr/local/lib/python3.11/dist-packages/cachetools-8.0.1.dist-info (project cachetools)"]
    assert sorted(rootfs_copies(tmp_path)) == expected
    out = subprocess.run(["bash", str(SCRIPT), "--check-copies", str(tmp_path), str(PROJECTS_FILE)],
                         capture_output=True, text=True, check=True).stdout
    assert sorted(out.split()) == sorted(e.split(" (")[0] for e in expected)
    assert set(load_projects()) >= {"toolz", "parse", "cachetools", "python-dateutil"}


@pytest.mark.docker
def test_the_swe_image_cannot_import_a_project_under_test():
    from tests.helpers import require_backend

    require_backend("docker")
    code = ("import importlib.util as u; print([m for m in ('dateutil', 'more_itertools', 'toolz', 'tabulate') "
            "if u.find_spec(m)]); import pytest, hypothesis")
    out = subprocess.run(["docker", "run", "--rm", "--network", "none", "clawgym-swe:current",
                          "python3", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
