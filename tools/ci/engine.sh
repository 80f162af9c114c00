# Sourced by tools/ci/test.sh: a real container engine for the container-runner tests.
#
# OEQ_WHEELS_TEST_ENGINE=docker (CI's test.yml, which pulls the pinned image) uses the engine that
# `docker` reaches as it is. Otherwise the tests get an engine of their own: as root (or through password-free
# sudo, as on GitHub's runner) with apt,
# Debian's docker.io (and podman with runc, and debootstrap for the test image), and a dockerd on
# a private socket with its own data and exec roots (--iptables=false --ip6tables=false
# --bridge=none, overlay2 else vfs), stopped by its pid at the end. A daemon on the default socket
# is never used or touched.
# Each engine's state goes to the tests as OEQ_WHEELS_ENGINE_DOCKER / OEQ_WHEELS_ENGINE_PODMAN: "up", "skip: WHY"
# (it cannot be had here: not root, no apt-get) or "fail: WHY" (it could be had and bringing it up failed: the
# command and its last line). tests/integration/test_container.py turns a skip into a named SKIPPED (a failure where
# OEQ_WHEELS_TEST_REQUIRE names engines) and a fail into a FAILURE; test.sh repeats both as its last lines.
engine_up() {
  ENGINE_PID=""
  ENGINE_RUN=""
  ENGINE_SUDO=()
  # Images and volumes persist in the cache (the test image is imported once), as bootstrap.sh names it.
  ENGINE_CACHE="${OEQ_WHEELS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/oeq-wheels}"
  if [ "${OEQ_WHEELS_TEST_ENGINE:-}" = docker ]; then
    echo "test.sh: container tests use the engine 'docker' reaches (OEQ_WHEELS_TEST_ENGINE=docker)" >&2
    export OEQ_WHEELS_ENGINE_DOCKER=up
    if command -v podman >/dev/null 2>&1 && command -v runc >/dev/null 2>&1; then
      ENGINE_RUN="$(mktemp -d /tmp/oeq-wheels-engine.XXXXXX)"
      _podman_up
    else
      export OEQ_WHEELS_ENGINE_PODMAN="skip: podman and runc are not installed beside that Docker"
    fi
    return 0
  fi
  # As root, or as a user with password-free sudo (GitHub's runner): the engines run as root, their sockets
  # reachable by this user.
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
    ENGINE_SUDO=(sudo -n)
  fi
  if { [ "$(id -u)" != 0 ] && [ ${#ENGINE_SUDO[@]} = 0 ]; } || ! command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: no container engine of our own (needs root or password-free sudo, and apt-get); the real-engine tests skip" >&2
    export OEQ_WHEELS_ENGINE_DOCKER="skip: no container engine of our own: starting one needs root (or password-free sudo) and apt-get (tools/ci/engine.sh)"
    export OEQ_WHEELS_ENGINE_PODMAN="$OEQ_WHEELS_ENGINE_DOCKER"
    return 0
  fi
  local need=() failed=""
  command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
  command -v podman >/dev/null 2>&1 || need+=(podman)
  command -v runc >/dev/null 2>&1 || need+=(runc)
  if [ ${#need[@]} -gt 0 ]; then
    echo "test.sh: installing ${need[*]} (Debian packages) for the container-runner tests" >&2
    local log
    log="$(mktemp)"
    { "${ENGINE_SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" ||
      { "${ENGINE_SUDO[@]}" apt-get update -qq &&
        "${ENGINE_SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"; }; } >"$log" 2>&1 ||
      failed="apt-get install ${need[*]} failed: $(grep -v '^\s*$' "$log" | tail -n 1)"
    rm -f "$log"
    [ -z "$failed" ] || echo "test.sh: $failed" >&2
  fi
  ENGINE_RUN="$(mktemp -d /tmp/oeq-wheels-engine.XXXXXX)"
  if ! command -v dockerd >/dev/null 2>&1; then
    export OEQ_WHEELS_ENGINE_DOCKER="fail: ${failed:-dockerd is not on PATH}"
  else
    _dockerd_up
  fi
  if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
    export OEQ_WHEELS_ENGINE_PODMAN="fail: ${failed:-podman or runc is not on PATH}"
  else
    _podman_up
  fi
  return 0
}

_dockerd_up() {
  local driver sock
  sock="unix://$ENGINE_RUN/docker.sock"
  for driver in overlay2 vfs; do
    mkdir -p "$ENGINE_CACHE/dockerd-$driver"
    # --group: the socket is this user's (root's own group as root), as the docker group makes it on GitHub's runner.
    # By its path on this user's PATH: sudo's own PATH (secure_path) would take another dockerd than this user's.
    "${ENGINE_SUDO[@]}" "$(command -v dockerd)" -H "$sock" --group "$(id -g)" --data-root "$ENGINE_CACHE/dockerd-$driver" \
      --exec-root "$ENGINE_RUN/exec" --pidfile "$ENGINE_RUN/dockerd.pid" --iptables=false --ip6tables=false \
      --bridge=none --storage-driver "$driver" >"$ENGINE_RUN/dockerd-$driver.log" 2>&1 &
    ENGINE_PID=$!
    local i
    for i in $(seq 60); do
      DOCKER_HOST="$sock" docker info >/dev/null 2>&1 && break
      "${ENGINE_SUDO[@]}" kill -0 "$ENGINE_PID" 2>/dev/null || break
      sleep 0.5
    done
    if DOCKER_HOST="$sock" docker info >/dev/null 2>&1; then
      export DOCKER_HOST="$sock" OEQ_WHEELS_TEST_ENGINE=private OEQ_WHEELS_DOCKER_NETWORK=host OEQ_WHEELS_ENGINE_DOCKER=up
      echo "test.sh: our own dockerd (pid $ENGINE_PID, $driver, $sock${ENGINE_SUDO:+, through sudo}) for the container-runner tests" >&2
      return 0
    fi
    "${ENGINE_SUDO[@]}" kill "$ENGINE_PID" 2>/dev/null; wait "$ENGINE_PID" 2>/dev/null
    ENGINE_PID=""
  done
  local last
  last="$(grep -v '^\s*$' "$ENGINE_RUN/dockerd-vfs.log" 2>/dev/null | tail -n 1)"
  export OEQ_WHEELS_ENGINE_DOCKER="fail: dockerd did not start (overlay2, then vfs): ${last:-it printed nothing}"
  echo "test.sh: ${OEQ_WHEELS_ENGINE_DOCKER#fail: }" >&2
}

# podman 4.3 here: runc (crun refuses this host's hybrid cgroups) and explicit nofile/nproc ulimits
# (root lacks CAP_SYS_RESOURCE), its own storage; a wrapper the tests use as DOCKER.
_podman_up() {
  cat >"$ENGINE_RUN/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
  # podman's database remembers the runroot its storage was made with and refuses any other, so the runroot
  # is one fixed path per cache (not this run's directory): a second `make test` finds podman working.
  local runroot
  runroot="/tmp/oeq-wheels-podman-run.$(printf '%s' "$ENGINE_CACHE" | sha256sum | cut -c1-12)"
  cat >"$ENGINE_RUN/podman" <<WRAP
#!/bin/sh
exec ${ENGINE_SUDO[*]} env CONTAINERS_CONF="$ENGINE_RUN/containers.conf" podman --root "$ENGINE_CACHE/podman/root" --runroot "$runroot" "\$@"
WRAP
  chmod +x "$ENGINE_RUN/podman"
  if ! "$ENGINE_RUN/podman" info >/dev/null 2>"$ENGINE_RUN/podman-info.log" &&
     grep -q "database configuration mismatch" "$ENGINE_RUN/podman-info.log"; then
    # storage an older test.sh made with a per-run runroot: a cache, made again (the test image is re-imported)
    "${ENGINE_SUDO[@]}" rm -rf "$ENGINE_CACHE/podman" "$runroot"
  fi
  if "$ENGINE_RUN/podman" info >/dev/null 2>"$ENGINE_RUN/podman-info.log"; then
    export OEQ_WHEELS_TEST_PODMAN="$ENGINE_RUN/podman" OEQ_WHEELS_ENGINE_PODMAN=up
    echo "test.sh: podman for the container-runner tests ($OEQ_WHEELS_TEST_PODMAN)" >&2
  else
    export OEQ_WHEELS_ENGINE_PODMAN="fail: podman info failed: $(grep -v '^\s*$' "$ENGINE_RUN/podman-info.log" | tail -n 1)"
    echo "test.sh: ${OEQ_WHEELS_ENGINE_PODMAN#fail: }" >&2
  fi
}

engine_down() {
  local sudo=("${ENGINE_SUDO[@]}")
  if [ -n "${ENGINE_PID:-}" ]; then
    "${sudo[@]}" kill "$ENGINE_PID" 2>/dev/null
    local i
    for i in $(seq 40); do "${sudo[@]}" kill -0 "$ENGINE_PID" 2>/dev/null || break; sleep 0.5; done
    "${sudo[@]}" kill -9 "$ENGINE_PID" 2>/dev/null || true
  fi
  if [ -n "${ENGINE_RUN:-}" ]; then
    # dockerd's netns mount outlives it; unmount what lies below the run directory, then remove it.
    awk -v d="$ENGINE_RUN" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r |
      xargs -r -n1 "${sudo[@]}" umount -l 2>/dev/null || true
    "${sudo[@]}" rm -rf "$ENGINE_RUN"
  fi
  return 0
}
