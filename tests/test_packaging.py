"""The wheel ships the bundled sample skills, and an installed (non-editable) package finds them."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_wheel_ships_the_sample_skills_and_an_installed_package_lists_them(tmp_path):
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(REPO)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp_path / "dist").glob("skills_magic-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for sample in sorted(p.relative_to(REPO / "sample-skills").as_posix() for p in (REPO / "sample-skills").rglob("*") if p.is_file()):
        assert f"skills_magic/sample_skills/{sample}" in names
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp_path / "site"), str(wheel)],
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr
    code = "from skills_magic.skills.catalog import bundled_skills_folder as b; from skills_magic.session import SkillsSession as S; " \
           "print(b()); print(sorted(s.name for s in S().scan().skills if s.source == 'bundled'))"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "SKILLS_MAGIC_SOURCES": "bundled"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    folder, names_line = run.stdout.splitlines()
    assert Path(folder) == tmp_path / "site" / "skills_magic" / "sample_skills"
    assert names_line == str(sorted(p.name for p in (REPO / "sample-skills").iterdir() if (p / "SKILL.md").is_file()))
