"""The example alerting rules of docs/operations.md, run by Prometheus's own
rule tester (``promtool test rules``, Debian's ``prometheus`` package): an
unclean stop is announced once the new boot has run a minute, and clears by
itself an hour into that boot. Skipped, saying why, without promtool."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROMTOOL = shutil.which("promtool")
SUMMARY = (
    "wardd restarted after an unclean stop (crash, SIGKILL or fail-stop): "
    "look at its unknown attempts"
)

# boot b1 (clean history) serves for an hour, then is SIGKILLed; b2 starts at 60m
SCENARIO = f"""
rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'wardd_boot_info{{boot="b1",version="0.1.0",instance="h:9469",job="wardd"}}'
        values: '1x59 _x150'
      - series: 'wardd_boot_info{{boot="b2",version="0.1.0",instance="h:9469",job="wardd"}}'
        values: '_x59 1x150'
      - series: 'wardd_previous_boot_clean{{instance="h:9469",job="wardd"}}'
        values: '1x59 0x150'
      - series: 'wardd_unknown_attempts{{instance="h:9469",job="wardd"}}'
        values: '0x210'
    alert_rule_test:
      - {{eval_time: 30m, alertname: WarddUncleanStop, exp_alerts: []}}
      - {{eval_time: 60m, alertname: WarddUncleanStop, exp_alerts: []}}
      - eval_time: 62m
        alertname: WarddUncleanStop
        exp_alerts:
          - exp_labels: {{instance: "h:9469", job: wardd}}
            exp_annotations: {{summary: "{SUMMARY}"}}
      - eval_time: 118m
        alertname: WarddUncleanStop
        exp_alerts:
          - exp_labels: {{instance: "h:9469", job: wardd}}
            exp_annotations: {{summary: "{SUMMARY}"}}
      - {{eval_time: 125m, alertname: WarddUncleanStop, exp_alerts: []}}
      - {{eval_time: 200m, alertname: WarddUncleanStop, exp_alerts: []}}
"""


@pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus)"
)
def test_the_unclean_stop_alert_fires_after_an_unclean_start_and_clears(tmp_path: Path) -> None:
    """promtool accepts the doc's rules, and WarddUncleanStop fires from a minute
    into a boot that followed an unclean stop until an hour into it, never before."""
    assert PROMTOOL is not None
    text = (ROOT / "docs" / "operations.md").read_text()
    (rules,) = [b for b in re.findall(r"^```yaml\n(.*?)^```", text, re.M | re.S) if "alert:" in b]
    (tmp_path / "rules.yml").write_text(rules)
    (tmp_path / "test.yml").write_text(SCENARIO)
    for argv in (["check", "rules", "rules.yml"], ["test", "rules", "test.yml"]):
        done = subprocess.run(
            [PROMTOOL, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stdout + done.stderr
