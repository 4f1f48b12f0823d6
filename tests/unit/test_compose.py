"""The production compose file and the worker's Dockerfile, read as data (no Docker engine
runs here, so nothing is built or started; tests/e2e/test_production.py runs the parts that
a Temporal dev server can: the search-attribute job, the server's health URL, the worker's
health check)."""

from __future__ import annotations

import re
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from orch.records import SEARCH_ATTRIBUTES

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.temporal.yml"
DOCKERFILE = REPO / "Dockerfile"
# Custom search attributes a namespace can hold on SQL visibility (PostgreSQL v12 schema:
# pre-allocated columns Keyword01-10, Int01-03, ...).
SQL_VISIBILITY_SLOTS = {"Keyword": 10, "Int": 3, "Bool": 3, "Datetime": 3, "Double": 3,
                        "Text": 3, "KeywordList": 3}
CREDENTIAL = re.compile(r"^(AWS|AZURE|GOOGLE|GCP)_|SECRET|TOKEN|PASSWORD|API_KEY|ACCESS_KEY")


def load_compose() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text()))


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    return dict(load_compose()["services"])


def environment(service: dict[str, Any]) -> dict[str, str | None]:
    env = service.get("environment", {})
    assert isinstance(env, dict), "environment is written as a mapping"
    return env


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1])
            for line in lines if line and not line.startswith("#")]


def test_the_services_of_the_control_plane(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == {"postgresql", "temporal-schema", "temporal",
                             "orch-search-attributes", "temporal-ui", "orch-worker"}


def test_images_are_maintained_and_pinned(services: dict[str, dict[str, Any]]) -> None:
    images = {name: s["image"] for name, s in services.items()}
    for name, image in images.items():
        repository, _, tag = image.rpartition(":")
        assert repository and tag and tag != "latest", f"{name}: {image} is not pinned"
        assert "auto-setup" not in image, f"{name}: auto-setup is for development"
    temporal = {images["temporal"].split(":")[0], images["temporal-schema"].split(":")[0]}
    assert temporal == {"temporalio/server", "temporalio/admin-tools"}
    versions = {images[n].split(":")[1] for n in ("temporal", "temporal-schema",
                                                  "orch-search-attributes")}
    assert len(versions) == 1, f"server and admin-tools move in step: {versions}"
    assert re.fullmatch(r"\d+\.\d+\.\d+", versions.pop())
    assert re.fullmatch(r"temporalio/ui:\d+\.\d+\.\d+", images["temporal-ui"])
    assert images["postgresql"] == "postgres:16"


def test_ports(services: dict[str, dict[str, Any]]) -> None:
    published = {name: s.get("ports", []) for name, s in services.items()}
    assert published == {"postgresql": [], "temporal-schema": [], "temporal": ["7233:7233"],
                         "orch-search-attributes": [], "temporal-ui": ["8080:8080"],
                         "orch-worker": []}


def test_startup_order_waits_on_health_and_on_the_one_shot_jobs(
    services: dict[str, dict[str, Any]],
) -> None:
    depends = {name: {d: c["condition"] for d, c in s.get("depends_on", {}).items()}
               for name, s in services.items()}
    assert depends == {
        "postgresql": {},
        "temporal-schema": {"postgresql": "service_healthy"},
        "temporal": {"temporal-schema": "service_completed_successfully"},
        "orch-search-attributes": {"temporal": "service_healthy"},
        "temporal-ui": {"temporal": "service_healthy"},
        "orch-worker": {"temporal": "service_healthy",
                        "orch-search-attributes": "service_completed_successfully"},
    }
    for name in ("postgresql", "temporal", "orch-worker"):
        assert services[name]["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
    for job in ("temporal-schema", "orch-search-attributes"):
        assert services[job]["restart"].startswith("on-failure"), f"{job} runs once"


def test_the_schema_job_sets_up_both_databases_the_server_reads(
    services: dict[str, dict[str, Any]],
) -> None:
    server = environment(services["temporal"])
    assert server["DB"] == "postgres12" and server["POSTGRES_SEEDS"] == "postgresql"
    assert server["BIND_ON_IP"] == "0.0.0.0"
    script = services["temporal-schema"]["command"][0]
    assert services["temporal-schema"]["entrypoint"] == ["/bin/sh", "-c"]
    for db, directory in ((server["DBNAME"], "temporal"),
                          (server["VISIBILITY_DBNAME"], "visibility")):
        assert f"{db}:{directory}" in script
    for step in ("create", "setup-schema -v 0.0", "update-schema -d"):
        assert f"$$tool {step}" in script
    assert "--plugin postgres12 --ep postgresql" in script
    assert "/etc/temporal/schema/postgresql/v12" in script
    password = environment(services["postgresql"])["POSTGRES_PASSWORD"]
    assert environment(services["temporal-schema"])["SQL_PASSWORD"] == password
    assert server["POSTGRES_PWD"] == password


def test_the_server_gets_the_dynamic_config_orch_needs(
    services: dict[str, dict[str, Any]],
) -> None:
    server = services["temporal"]
    mounts = dict(reversed(v.rsplit(":", 1)[0].split(":", 1)) for v in server["volumes"])
    source = mounts[environment(server)["DYNAMIC_CONFIG_FILE_PATH"]]
    config = yaml.safe_load((REPO / source).read_text())
    for setting in ("frontend.enableExecuteMultiOperation",
                    "frontend.enableUpdateWorkflowExecution"):
        assert config[setting] == [{"value": True}], setting


def registered_attributes(services: dict[str, dict[str, Any]]) -> dict[str, str]:
    listed = environment(services["orch-search-attributes"])["ORCH_SEARCH_ATTRIBUTES"]
    assert listed
    pairs = [item.split("=") for item in listed.split()]
    names = [name for name, _ in pairs]
    assert len(names) == len(set(names)), f"listed twice: {names}"
    return dict(pairs)  # type: ignore[arg-type]


def test_the_search_attributes_are_exactly_orchs(services: dict[str, dict[str, Any]]) -> None:
    assert registered_attributes(services) == SEARCH_ATTRIBUTES


def test_orchs_search_attributes_fit_sql_visibility() -> None:
    for kind, count in Counter(SEARCH_ATTRIBUTES.values()).items():
        assert count <= SQL_VISIBILITY_SLOTS[kind], (
            f"{count} {kind} search attributes: PostgreSQL visibility holds "
            f"{SQL_VISIBILITY_SLOTS[kind]} per namespace")


def test_the_worker_is_built_here_and_scales(services: dict[str, dict[str, Any]]) -> None:
    worker = services["orch-worker"]
    assert worker["build"] == "." and (REPO / "Dockerfile").is_file()
    assert "container_name" not in worker, "a fixed name forbids replicas"
    assert worker["deploy"]["replicas"].startswith("${")
    env = environment(worker)
    assert env["TEMPORAL_ADDRESS"] == "${ORCH_WORKER_TEMPORAL_ADDRESS:-temporal:7233}"
    assert "orch-home:/home/orch/.orch" in worker["volumes"]
    healthcheck = ["CMD", *re.findall(r'"([^"]+)"', dict(dockerfile_instructions())
                                      ["HEALTHCHECK"].split("CMD", 1)[1])]
    assert worker["healthcheck"]["test"] == healthcheck == [
        "CMD", "python", "-m", "workers", "--check"]


def test_the_worker_sets_no_credentials_in_clear(services: dict[str, dict[str, Any]]) -> None:
    worker = services["orch-worker"]
    secrets = {k: v for k, v in environment(worker).items() if CREDENTIAL.search(k)}
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AZURE_CLIENT_SECRET",
            "GOOGLE_APPLICATION_CREDENTIALS"} <= set(secrets)
    for name, value in secrets.items():
        assert value is None or value.startswith("${"), f"{name} is set in clear"
    assert environment(worker)["GOOGLE_APPLICATION_CREDENTIALS"] == (
        "${GCP_KEY_FILE:+/run/secrets/gcp-key.json}")
    for volume in worker["volumes"]:
        if "orch-home" not in volume:
            assert volume.endswith(":ro"), f"{volume}: credentials are mounted read-only"


def test_the_dockerfile_runs_the_worker_as_a_user_with_a_health_check() -> None:
    instructions = dockerfile_instructions()
    kinds = [kind for kind, _ in instructions]
    assert instructions[0] == ("FROM", "python:3.11-slim")
    users = [args for kind, args in instructions if kind == "USER"]
    assert users and users[-1] not in ("root", "0"), "the worker runs as a non-root user"
    assert kinds.index("USER") < kinds.index("ENTRYPOINT")
    assert dict(instructions)["ENTRYPOINT"] == '["python", "-m", "workers"]'
    assert "HEALTHCHECK" in kinds
    for kind, args in instructions:
        if kind in ("ENV", "ARG"):
            assert not CREDENTIAL.search(args), f"{kind} {args}: no credentials in the image"


def test_the_image_holds_every_package_and_nothing_else() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]
                ["include"]}
    copied = {source for kind, args in dockerfile_instructions() if kind == "COPY"
              for source in args.split()[:-1]}
    assert packages | {"pyproject.toml", "README.md"} == copied
    allowed = {line[1:].rstrip("/") for line in (REPO / ".dockerignore").read_text()
               .splitlines() if line.startswith("!")}
    assert allowed == copied
    assert "**" in (REPO / ".dockerignore").read_text().splitlines()
