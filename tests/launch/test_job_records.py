"""The job records under ``$NEMOTRON_HOME/submissions``: an unreadable one is said, not skipped in silence."""

from __future__ import annotations

from pathlib import Path

from nemotron.launch import jobs


def _record(n: int) -> jobs.JobRecord:
    return jobs.JobRecord(experiment_id=f"exp-{n}", job_id=str(100 + n), stage="pretrain", title="ultra3 pretrain",
                          profile="c", env_file="env.toml", run_dir="/r", log_dir="/l", job_name="j", submitted=float(n))


def test_a_corrupt_latest_record_is_named_and_the_others_still_load(capsys):
    """The newest record is garbage (a disk-full write, a hand edit): ``status`` showed the one before as the
    latest, with no word. It still does (the others are intact), but says which file it left out."""
    jobs.save(_record(1))
    newest = Path(jobs.save(_record(2)))
    newest.write_text("{broken", encoding="utf-8")
    rec = jobs.load(None)
    assert rec.experiment_id == "exp-1"
    err = capsys.readouterr().err
    assert f"warning: {newest}: unreadable submission record (JSONDecodeError); left out" in err
