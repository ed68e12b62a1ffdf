"""experiments/benchmarks/microbatches.py on a small graph, tiny budgets: the table it writes."""

from experiments.benchmarks.microbatches import main


def test_microbatches_table(tmp_path, capsys):
    out = tmp_path / "mb.md"
    assert main(["--graphs", "datasets/mlp/mlp_000.json.gz", "--microbatches", "2", "--budget", "5",
                 "--devices", "2", "--out", str(out)]) == 0
    lines = [line for line in out.read_text().splitlines() if line.startswith("| mlp_000 ")]
    assert [line.split(" | ")[2] for line in lines] == ["1", "2", "4"]  # M = 1 always, then M = 1's best at M = 4
    assert "M=1's best" in lines[-1] and "1.00x" in lines[0]
    capsys.readouterr()
