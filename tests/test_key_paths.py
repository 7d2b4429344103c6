"""Key paths name an entry of a list of named things by its name, and by its index only where a name cannot find it."""

from __future__ import annotations

import pytest

from components.config.load import load_stack_config
from components.model.key_paths import entry_paths
from components.model.problems import ConfigError
from tests.conftest import vhost_config


def test_a_named_entry_is_shown_by_its_name_and_a_list_of_values_by_index():
    raw = {"vhosts": [vhost_config(queues=[{"name": "orders.invoices", "retry": {"delays": ["1s", "10x"]}}])]}
    with pytest.raises(ConfigError) as refused:
        load_stack_config(raw)
    assert [path for path, _ in refused.value.problems] == ["vhosts[shop].queues[orders.invoices].retry.delays[1]"]


def test_applications_and_operators_go_by_their_user():
    assert entry_paths("vhosts[shop]", "applications", [{"user": "billing"}]) == ("vhosts[shop].applications[billing]",)
    assert entry_paths("vhosts[shop]", "operators", [{"user": "ops"}]) == ("vhosts[shop].operators[ops]",)


@pytest.mark.parametrize(("entries", "paths"), [
    pytest.param([{"name": "a"}, {"name": "a"}, {"name": "b"}], ["queues[0]", "queues[1]", "queues[b]"],
                 id="written-twice"),
    pytest.param([{"name": 42}, {}, "orders", {"name": ""}], ["queues[0]", "queues[1]", "queues[2]", "queues[3]"],
                 id="no-string-name"),
])
def test_an_entry_a_name_cannot_find_goes_by_its_index(entries, paths):
    assert list(entry_paths("", "queues", entries)) == paths


def test_an_unnamed_list_goes_by_index_whatever_its_entries_hold():
    assert entry_paths("q", "bindings", [{"exchange": "events"}]) == ("q.bindings[0]",)


@pytest.mark.parametrize(("name", "shown"), [
    ("orders.invoices", "orders.invoices"),
    ("ünï:billing-2", "ünï:billing-2"),
    ("0", '"0"'),
    ("a]b", '"a]b"'),
    ("a[b", '"a[b"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("team shop", '"team shop"'),
    ("tab\there", '"tab\\there"'),
])
def test_a_name_that_could_be_misread_is_a_json_string(name, shown):
    assert entry_paths("", "vhosts", [{"name": name}]) == (f"vhosts[{shown}]",)
