"""The Java that runs Kafka: found ($JAVA_HOME's, else the PATH's) and checked to be recent
enough, and the command line Kafka's classes run with."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from trialog.broker.config import BrokerConfig
from trialog.errors import BrokerError

MIN_JAVA = 17


def find_java() -> str:
    """The ``java`` to run Kafka with ($JAVA_HOME's, as Kafka's own scripts do, else the PATH's), checked to be 17+."""
    java_home = os.environ.get("JAVA_HOME")
    home_java = Path(java_home) / "bin" / "java" if java_home else None
    java = str(home_java) if home_java and home_java.is_file() else shutil.which("java")
    if not java:
        raise BrokerError(
            f"Kafka needs Java {MIN_JAVA} or newer, and there is no `java` on PATH. "
            f"Install a JDK or JRE {MIN_JAVA}+ (e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME."
        )
    output = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    version = java_version_string(output)
    if java_major(version) < MIN_JAVA:
        raise BrokerError(
            f"Kafka needs Java {MIN_JAVA} or newer; {java} is Java {version}. "
            f"Install Java {MIN_JAVA}+ and put it on PATH (or set JAVA_HOME)."
        )
    return java


def java_version_string(version_output: str) -> str:
    """The quoted version in ``java -version``'s output, e.g. ``17.0.15`` from
    ``openjdk version "17.0.15" 2025-04-15``."""
    match = re.search(r'version "([^"]+)"', version_output)
    if not match:
        raise BrokerError(f"cannot tell the Java version from `java -version`, which said: {version_output.strip()!r}")
    return match.group(1)


def java_major(version: str) -> int:
    """The major version: ``17.0.15`` → 17, ``21`` → 21, ``21-ea`` → 21, and the old scheme ``1.8.0_392`` → 8."""
    parts = re.split(r"[._+\-]", version)
    if not parts[0].isdigit():
        raise BrokerError(f"cannot tell the Java major version from {version!r}")
    if parts[0] == "1" and len(parts) > 1 and parts[1].isdigit():
        return int(parts[1])
    return int(parts[0])


def _java_command(config: BrokerConfig, java: str) -> list[str]:
    log4j2 = config.data_dir / "log4j2.properties"
    classpath = f"{config.libs_dir}/*" + (f":{config.tools_dir}/*" if config.tools_dir.is_dir() else "")
    return [java, f"-Xmx{config.heap}", f"-Dlog4j2.configurationFile={log4j2}", "-cp", classpath]
