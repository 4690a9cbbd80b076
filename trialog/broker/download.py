"""Kafka's jars, fetched once with Maven from Maven Central into a cache outside the
repository (one folder per Kafka version), and Kafka's tools jar for ``--secure``."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from trialog.broker.config import BrokerConfig, _last_lines
from trialog.errors import BrokerError
from trialog.telemetry.logs import get_logger

log = get_logger(__name__)

# Kafka 4.x's own slf4j is 1.7, which cannot bind to log4j2's slf4j2 provider; pinning
# slf4j-api 2.x as a direct dependency makes Maven's nearest-wins pick it.
_EXTRA_DEPENDENCIES = (
    ("org.slf4j", "slf4j-api", "2.0.17"),
    ("org.apache.logging.log4j", "log4j-slf4j2-impl", "2.24.3"),
    ("org.apache.logging.log4j", "log4j-core", "2.24.3"),
)
_MAVEN_TIMEOUT_S = 900.0


def ensure_kafka(config: BrokerConfig) -> Path:
    """The folder of Kafka's jars, fetched with Maven the first time."""
    if _jars_cached(config):
        return config.libs_dir
    mvn = shutil.which("mvn")
    if not mvn:
        raise BrokerError(
            f"Kafka {config.kafka_version} is not cached in {config.libs_dir.parent} and Maven (`mvn`) is not on PATH "
            "to fetch it. Install Maven (e.g. `apt-get install maven`); it is needed once, for the first start."
        )
    print(f"fetching Kafka {config.kafka_version} with Maven (first time only)…", file=sys.stderr, flush=True)
    config.cache_dir.mkdir(parents=True, exist_ok=True)
    # Fetch into a temporary folder beside the cache and rename it into place, so an
    # interrupted or failed fetch never looks like a cached one.
    with tempfile.TemporaryDirectory(prefix=f".kafka-{config.kafka_version}-", dir=config.cache_dir) as tmp:
        staging = Path(tmp) / "kafka"
        _maven_copy_dependencies(mvn, config.kafka_version, Path(tmp), staging / "libs")
        try:
            staging.rename(config.libs_dir.parent)
        except OSError as exc:
            # Another start fetched the same version meanwhile; its copy is as good as ours.
            if not _jars_cached(config):
                raise BrokerError(f"could not move the fetched jars into {config.libs_dir.parent}: {exc}") from exc
    log.info("kafka fetched", version=config.kafka_version, libs=str(config.libs_dir))
    return config.libs_dir


def ensure_tools(config: BrokerConfig) -> Path:
    """Kafka's tools jar (for ``AclCommand``), beside the broker's jars; the rest of what it
    needs is already there, so only that jar is fetched."""
    jar = config.tools_dir / f"kafka-tools-{config.kafka_version}.jar"
    if jar.is_file():
        return config.tools_dir
    mvn = shutil.which("mvn")
    if not mvn:
        raise BrokerError(
            "`trialog broker start --secure` fetches Kafka's tools jar once with Maven (`mvn`), which is not on PATH"
        )
    with tempfile.TemporaryDirectory(prefix=".kafka-tools-", dir=config.cache_dir) as tmp:
        staging = Path(tmp) / "tools"
        _maven_copy_dependencies(
            mvn,
            config.kafka_version,
            Path(tmp),
            staging,
            artifacts=(("org.apache.kafka", "kafka-tools", config.kafka_version),),
            transitive=False,
        )
        try:
            staging.rename(config.tools_dir)
        except OSError as exc:
            if not jar.is_file():
                raise BrokerError(f"could not move Kafka's tools jar into {config.tools_dir}: {exc}") from exc
    return config.tools_dir


def _jars_cached(config: BrokerConfig) -> bool:
    return (config.libs_dir / f"kafka_2.13-{config.kafka_version}.jar").is_file()


def _maven_copy_dependencies(
    mvn: str, kafka_version: str, workdir: Path, output: Path, *, artifacts=None, transitive: bool = True
) -> None:
    pom = workdir / "pom.xml"
    pom.write_text(_render_pom(kafka_version, artifacts))
    command = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={output}",
        "-DincludeScope=runtime",
    ]
    if not transitive:
        command.append("-DexcludeTransitive=true")
    try:
        done = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise BrokerError(
            f"Maven did not finish fetching Kafka {kafka_version} within {_MAVEN_TIMEOUT_S:.0f} s; "
            "check the network and try again"
        ) from exc
    if done.returncode != 0:
        said = _maven_problem(done.stdout + done.stderr)
        raise BrokerError(
            f"Maven could not fetch Kafka {kafka_version} (exit {done.returncode}). "
            f"Check that {kafka_version} is a Kafka release fully published on Maven Central "
            f"and that Maven reaches its repositories (~/.m2/settings.xml). "
            f"Maven said:\n{said}"
        )


def _maven_problem(output: str) -> str:
    """Maven's error without the advice boilerplate that follows its first bare ``[ERROR]`` line."""
    # Maven 3.8 writes colour resets even in batch mode.
    lines = re.sub(r"\x1b\[[0-9;]*m", "", output).rstrip().splitlines()
    if "[ERROR]" in (line.strip() for line in lines):
        lines = lines[: [line.strip() for line in lines].index("[ERROR]")]
    return _last_lines("\n".join(lines))


def _render_pom(kafka_version: str, artifacts=None) -> str:
    dependencies = artifacts or (("org.apache.kafka", "kafka_2.13", kafka_version), *_EXTRA_DEPENDENCIES)
    rendered = "\n".join(
        f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
        f"<version>{version}</version></dependency>"
        for group, artifact, version in dependencies
    )
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.trialog</groupId>
  <artifactId>kafka-fetch</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{rendered}
  </dependencies>
</project>
"""
