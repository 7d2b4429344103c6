import re

import pytest

from components.model import naming


def test_retryable_queue_names_follow_the_documented_scheme():
    assert naming.derived_queue_names("orders", 2) == ["orders", "orders.wait.1", "orders.wait.2", "orders.error"]
    assert naming.derived_exchange_names("orders") == ["orders.retry", "orders.requeue", "orders.error"]
    assert naming.wait_routing_key(3) == "wait.3"


@pytest.mark.parametrize("name", ["orders", "orders.wait.1", "a+b", "x(1)", "$weird^name*", "队列.重试"])
def test_exact_pattern_matches_only_its_own_name(name):
    pattern = re.compile(naming.exact_pattern(name))
    assert pattern.search(name)
    for other in (name + "x", "x" + name, name + ".wait.1", name.replace(".", "-")):
        if other != name:
            assert not pattern.search(other), other


def test_attempt_header_is_not_an_x_header():
    # RabbitMQ 3.13+/4.x ignore client-published x- headers for death counting.
    assert not naming.ATTEMPT_HEADER.startswith("x-")


@pytest.mark.parametrize(("vhost", "key"), [("shop", "shop"), ("/", "%2F"), ("a/b", "a%2Fb")])
def test_vhost_logical_names_never_contain_a_slash(vhost, key):
    assert naming.vhost_key(vhost) == key


def test_binding_keys_are_stable_and_distinguish_header_arguments():
    plain = naming.binding_key("q", "x", "rk", {})
    assert plain == "binding-q-x-rk"
    assert naming.binding_key("q", "x", "", {}) == "binding-q-x"
    a = naming.binding_key("q", "x", "", {"x-match": "all", "kind": "a"})
    b = naming.binding_key("q", "x", "", {"kind": "a", "x-match": "all"})
    c = naming.binding_key("q", "x", "", {"x-match": "all", "kind": "b"})
    assert a == b != c
