"""Paths under QWENMEM_HOME and project detection."""

from __future__ import annotations

from pathlib import Path

from qwenmem_tui.paths import Paths, project_id, project_root


def test_home_from_env_and_default(tmp_path: Path) -> None:
    assert Paths.from_env({"QWENMEM_HOME": str(tmp_path)}).home == tmp_path
    assert Paths.from_env({}).home == Path.home() / ".qwenmem"


def test_layout_and_ensure(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "home")
    assert paths.config_file == tmp_path / "home" / "config.toml"
    assert paths.db_file.name == "qwenmem.db"
    paths.ensure()
    assert paths.index_dir.is_dir() and paths.debug_dir.is_dir() and paths.run_dir.is_dir()
    paths.ensure()  # idempotent


def test_project_root_walks_up_to_git(project: Path) -> None:
    nested = project / "src" / "pkg"
    nested.mkdir(parents=True)
    assert project_root(nested) == project.resolve()
    assert project_id(project_root(nested)) == str(project.resolve())


def test_project_root_accepts_git_file_worktrees(tmp_path: Path) -> None:
    (tmp_path / "wt").mkdir()
    (tmp_path / "wt" / ".git").write_text("gitdir: /elsewhere\n")
    assert project_root(tmp_path / "wt") == (tmp_path / "wt").resolve()


def test_without_git_the_cwd_is_the_project(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    # tmp dirs are not inside a git checkout, so the walk finds nothing above.
    assert project_root(plain) == plain.resolve()
