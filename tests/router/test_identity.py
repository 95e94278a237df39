"""Client.from_environment (issue #12, item 6): the meta KBear's Java client sends."""

from __future__ import annotations

import socket

import pytest

from kbear import Client, Router
from kbear.sources import MemorySource


def test_reads_kbear_environment_variables() -> None:
    env = {
        "KBEAR_APP_ID": "100000001",
        "KBEAR_ENV": "UAT",
        "KBEAR_SUB_ENV": "fat1",
        "KBEAR_IDC": "sha",
        "KBEAR_IP": "10.1.2.3",
        "KBEAR_HOST_NAME": "app-host-1",
        "KBEAR_JOB_TYPE": "spark",
        "KBEAR_JOB_NAME": "billing-daily",
        "KBEAR_JOB_DEPARTMENT": "hotel",
    }
    client = Client.from_environment(env)
    assert client.id == "100000001"  # the app id, when no KBEAR_CLIENT_ID
    assert dict(client.meta) == {
        "appId": "100000001",
        "env": "UAT",
        "subEnv": "fat1",
        "idc": "sha",
        "ip": "10.1.2.3",
        "hostName": "app-host-1",
        "jobType": "spark",
        "jobName": "billing-daily",
        "jobDepartment": "hotel",
    }


def test_fallback_variables_and_host() -> None:
    client = Client.from_environment({"APP_ID": "42", "ENV": "PRO", "IDC": "ntgxh", "KBEAR_CLIENT_ID": "c-1"})
    assert client.id == "c-1"
    assert client.meta["appId"] == "42"
    assert client.meta["env"] == "PRO"
    assert client.meta["idc"] == "ntgxh"
    assert client.meta["hostName"] == socket.gethostname()
    assert "subEnv" not in client.meta and "jobType" not in client.meta


def test_kbear_variable_wins_and_blank_is_unset() -> None:
    client = Client.from_environment({"KBEAR_ENV": "  ", "ENV": "UAT", "KBEAR_IDC": "sha", "IDC": "other"})
    assert client.meta["env"] == "UAT"
    assert client.meta["idc"] == "sha"
    assert client.id is None


def test_ip_of_the_host_when_not_given() -> None:
    ip = Client.from_environment({}).meta.get("ip")
    if ip is not None:
        socket.inet_aton(ip)  # an IPv4 address


def test_extra_meta_wins() -> None:
    client = Client.from_environment({"KBEAR_JOB_TYPE": "storm"}, meta={"jobType": "flink", "team": "x"})
    assert client.meta["jobType"] == "flink"
    assert client.meta["team"] == "x"


@pytest.mark.parametrize(("env", "cluster"), [("UAT", "uat"), ("PRO", "fws")])
def test_rules_on_client_env_work_without_hand_written_meta(env: str, cluster: str) -> None:
    source = MemorySource(
        {
            "clusters.yaml": {
                "clusters": [
                    {"id": "fws", "meta": {"bootstrap.servers": "fws:9092"}},
                    {"id": "uat", "meta": {"bootstrap.servers": "uat:9092"}},
                ]
            },
            "route-rules.yaml": {
                "route-rules": [
                    {"id": "r1", "meta": {"rule.isGlobal": "true"}, "rule": "use cluster fws"},
                    {
                        "id": "r2",
                        "priority": 1,
                        "meta": {"rule.isGlobal": "true"},
                        "rule": "use cluster uat when client.env=UAT",
                    },
                ]
            },
        }
    )
    router = Router.from_source(source)
    assert router.route_producer("orders", Client.from_environment({"ENV": env})).cluster_id == cluster
