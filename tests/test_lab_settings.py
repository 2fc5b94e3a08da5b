"""The JupyterLab setting that keeps widgets in saved notebooks, merged into an environment's overrides."""
import json
import subprocess
import sys

import pytest

from ringlab.lab.settings import OVERRIDES, overrides_path, write_overrides


def test_overrides_turn_on_saved_widget_state_and_keep_other_settings(tmp_path):
    path = overrides_path(tmp_path)
    assert path == tmp_path / "share/jupyter/lab/settings/overrides.json" and not path.exists()
    assert write_overrides(tmp_path) == path
    assert json.loads(path.read_text()) == OVERRIDES
    path.write_text(json.dumps({"@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"},
                                "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": False, "x": 1}}))
    write_overrides(tmp_path)
    settings = json.loads(path.read_text())
    assert settings["@jupyterlab/apputils-extension:themes"] == {"theme": "JupyterLab Dark"}
    assert settings["@jupyter-widgets/jupyterlab-manager:plugin"] == {"saveState": True, "x": 1}
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a JSON object"):
        write_overrides(tmp_path)
    path.write_text("{oops")
    with pytest.raises(ValueError, match="not valid JSON"):
        write_overrides(tmp_path)


def test_the_setup_commands_write_them():
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    assert '"ringlab.lab", "settings"' in (repo / "dev.py").read_text()
    assert "python -m ringlab.lab settings" in (repo / "binder" / "postBuild").read_text()
    done = subprocess.run([sys.executable, "-m", "ringlab.lab"], capture_output=True, text=True)
    assert done.returncode == 2 and "settings" in done.stderr
