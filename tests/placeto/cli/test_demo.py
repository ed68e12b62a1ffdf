"""The demo's sections print readable lines: no raw Python dicts, one line about the policy used."""

from placeto.cli.demo import datasets_section, describe_program


def test_describe_program_is_a_readable_phrase_without_the_seed():
    program = {"kind": "nmt", "kwargs": {"seed": 7, "layers": 2, "batch": 32}}
    assert describe_program(program) == "nmt, layers 2, batch 32"
    assert describe_program({"kind": "ptb", "kwargs": {}}) == "ptb"


def test_datasets_section_prints_no_python_dicts(capsys):
    datasets_section()
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("nmt_0")]
    assert len(rows) == 8 and all(line.rstrip().split("  ")[-1].startswith("nmt, layers ") for line in rows), out
    assert "{" not in out and "}" not in out and "'kind'" not in out
