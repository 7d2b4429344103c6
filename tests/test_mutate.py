"""`make mutate` stays able to break the code: every mutation still finds its original text exactly once,
and applying one really changes the file (running the mutated suites is `make mutate`, not part of CI)."""

from pathlib import Path

import pytest

from tools.lib import mutate


def test_every_mutation_fits_the_code():
    assert mutate.check_fits() == []


@pytest.mark.parametrize("mutation", mutate.MUTATIONS, ids=lambda m: m.path)
def test_applying_a_mutation_changes_exactly_its_file(mutation: mutate.Mutation, tmp_path: Path):
    source = (mutate.ROOT / mutation.path).read_text()
    target = tmp_path / mutation.path
    target.parent.mkdir(parents=True)
    target.write_text(source)
    mutate.apply(mutation, tmp_path)
    changed = target.read_text()
    assert changed != source and mutation.original not in changed


def test_a_mutation_that_no_longer_fits_is_refused(tmp_path: Path):
    mutation = mutate.MUTATIONS[0]
    (tmp_path / mutation.path).parent.mkdir(parents=True)
    (tmp_path / mutation.path).write_text("nothing to mutate here\n")
    assert mutate.check_fits(tmp_path)[0].startswith(mutation.name)
    with pytest.raises(SystemExit, match="0 times, not once"):
        mutate.apply(mutation, tmp_path)
