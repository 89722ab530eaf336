#!/usr/bin/env bash
# Builds the pinned Go tools of the local control plane from their Go modules
# into a cache directory keyed by the pins, and prints that bin directory.
# Usage: build.sh [--print-dir [gitops|observability]] [--list demo|test]
#                 [--for demo|test] [tool...]
#   control plane (pins.env):          etcd kubernetes kubectl registry cosign helm ptah
#   GitOps (gitops.env):               flux argocd-health
#   observability (observability.env): jaeger promtool
# Each set has its own cache directory, keyed by its own pins file, so adding
# a GitOps or observability tool does not rebuild the control plane.
# `--for demo` builds only what the demo uses (the control plane, the Ptah
# CLI and the tracing backend); `--for test`, or no tool named, builds all.
# `--list` prints a command's tools and builds nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=pins.env
source "$here/pins.env"
# shellcheck source=gitops.env
source "$here/gitops.env"
# shellcheck source=observability.env
source "$here/observability.env"
cache=${PTAH_TOOLS_CACHE:-$HOME/.cache/ptah-operator/tools}
key=$(sha256sum <"$here/pins.env" | cut -c1-16)
gitops_key=gitops-$(sha256sum <"$here/gitops.env" | cut -c1-16)
observability_key=observability-$(sha256sum <"$here/observability.env" | cut -c1-16)
# The tools each command uses.
tools_for() {
  case $1 in
    demo) echo "etcd kubernetes ptah kubectl jaeger" ;;
    test) echo "etcd kubernetes kubectl registry cosign helm ptah flux argocd-health jaeger promtool" ;;
    *) echo "unknown command: $1 (demo or test)" >&2; return 2 ;;
  esac
}
# Seconds each took to build cold on 2 cores with nothing else running
# (docs/performance.md), for the progress lines.
expected_seconds() {
  case $1 in
    etcd) echo 59 ;; kubernetes) echo 242 ;; kubectl) echo 20 ;; registry) echo 78 ;;
    cosign) echo 163 ;; helm) echo 130 ;; ptah) echo 107 ;; flux) echo 235 ;;
    argocd-health) echo 209 ;; jaeger) echo 313 ;; promtool) echo 71 ;;
    *) echo 0 ;;
  esac
}
if [ "${1:-}" = "--list" ]; then
  tools_for "${2:-test}"
  exit 0
fi
if [ "${1:-}" = "--print-dir" ]; then
  case ${2:-} in
    gitops) echo "$cache/$gitops_key/bin" ;;
    observability) echo "$cache/$observability_key/bin" ;;
    *) echo "$cache/$key/bin" ;;
  esac
  exit 0
fi
# Sets where the next tool is built: the control plane's, the GitOps or the
# observability set.
use_set() {
  root=$cache/$1; bin=$root/bin
  mkdir -p "$bin" "$root/logs"
}
use_set "$key"
export GOFLAGS=-trimpath CGO_ENABLED=0 GOTOOLCHAIN=${GOTOOLCHAIN:-local}
# No symbol table or DWARF: nothing here debugs the tools, and the linker
# writes less (a shorter link of each large binary).
strip="-s -w"

say() { printf '[tools %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# Runs a build in the background, printing a heartbeat while it goes so that a
# 10-minute compile is visibly alive.
with_progress() {
  local name=$1; shift
  local log=$root/logs/$name.log start=$SECONDS
  ( "$@" ) >"$log" 2>&1 &
  local pid=$!
  local ticks=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1; ticks=$((ticks + 1))
    if [ $((ticks % 15)) = 0 ] && kill -0 "$pid" 2>/dev/null; then
      say "$name: building ($((SECONDS - start))s, $(wc -l <"$log") log lines)"
    fi
  done
  if ! wait "$pid"; then say "$name: FAILED after $((SECONDS - start))s; last lines of $log:"; tail -25 "$log" >&2; return 1; fi
  say "$name: done in $((SECONDS - start))s"
}

# A scratch module whose go.mod requires the tool's module and names its main
# packages as tools; `go build` then builds them at exactly the pinned version.
tool_module() {
  local dir=$root/src/$1; shift
  rm -rf "$dir"; mkdir -p "$dir"; cd "$dir"
  go mod init "ptah.local/tools/$(basename "$dir")" >/dev/null 2>&1
}

build_etcd() {
  with_progress etcd bash -c "
    $(declare -f tool_module); root=$root
    tool_module etcd
    go get -tool go.etcd.io/etcd/server/v3@$ETCD_VERSION
    go build -ldflags '$strip' -o '$bin/etcd.tmp' go.etcd.io/etcd/server/v3 && mv '$bin/etcd.tmp' '$bin/etcd'"
}

# Kubernetes' binaries: the control plane's three (tool `kubernetes`), or
# kubectl (tool `kubectl`, which only the commands a person types use, so the
# demo builds it after its schema is InSync). Both from one pinned module.
build_kubernetes() { # tool binary...
  local tool=$1; shift
  local want=("$@")
  local minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
  local staging=v0.${KUBERNETES_VERSION#v1.}
  local ld=$strip
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  with_progress "$tool" bash -c "
    set -euo pipefail
    $(declare -f tool_module); root=$root
    tool_module $tool
    # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them
    # with local paths; pin each one it requires to the matching release.
    curl -fsS https://proxy.golang.org/k8s.io/kubernetes/@v/$KUBERNETES_VERSION.mod 2>/dev/null >upstream.mod \
      || go mod download -json k8s.io/kubernetes@$KUBERNETES_VERSION | sed -n 's/.*\"GoMod\": \"\\(.*\\)\".*/\\1/p' | xargs cat >upstream.mod
    for m in \$(awk '/^require/,/^\\)/' upstream.mod | awk '\$1 ~ /^k8s.io\\// && \$2 == \"v0.0.0\" {print \$1}'); do
      go mod edit -replace=\$m=\$m@$staging
    done
    go mod edit -require=k8s.io/kubernetes@$KUBERNETES_VERSION
    go mod edit -tool=k8s.io/kubernetes/cmd/kube-apiserver -tool=k8s.io/kubernetes/cmd/kube-controller-manager -tool=k8s.io/kubernetes/cmd/kube-scheduler -tool=k8s.io/kubernetes/cmd/kubectl
    go mod tidy
    # The missing ones in one build, so that one binary's link runs while
    # the next one's packages compile.
    pkgs=
    for b in ${want[*]}; do
      [ -x '$bin/'\$b ] || pkgs=\"\$pkgs k8s.io/kubernetes/cmd/\$b\"
    done
    rm -rf '$root/bin.tmp-$tool'; mkdir -p '$root/bin.tmp-$tool'
    go build -ldflags '$ld' -o '$root/bin.tmp-$tool/' \$pkgs
    mv '$root'/bin.tmp-$tool/* '$bin/'"
}

build_simple() { # name module-path package version [build tags]
  local name=$1 mod=$2 pkg=$3 ver=$4 tags=${5:-}
  with_progress "$name" bash -c "
    set -euo pipefail
    $(declare -f tool_module); root=$root
    tool_module $name
    go get -tool $pkg@$ver
    go build -tags '$tags' -ldflags '$strip' -o '$bin/$name.tmp' $pkg && mv '$bin/$name.tmp' '$bin/$name'"
}

# The executor, from the pinned source archive: its SHA-256 is checked before
# anything is unpacked, the one unserved dependency is substituted, and the
# build info is stamped as Ptah's Makefile does. Without the archive, a module
# proxy that serves the module gets the same version installed.
build_ptah() {
  local archive=${PTAH_ARCHIVE_DIR:-$here/../../../shared/vendor/ptah}/$PTAH_ARCHIVE
  local ld="-s -w -X go.5x5.cz/ptah/internal/buildinfo.Version=$PTAH_VERSION"
  ld="$ld -X go.5x5.cz/ptah/internal/buildinfo.Commit=$PTAH_COMMIT -X go.5x5.cz/ptah/internal/buildinfo.Date=$PTAH_DATE"
  if [ ! -f "$archive" ]; then
    say "ptah: no source archive at $archive; installing $PTAH_MODULE@$PTAH_VERSION from the module proxy"
    with_progress ptah bash -c "
      set -euo pipefail
      $(declare -f tool_module); root=$root
      tool_module ptah
      go get -tool $PTAH_MODULE/cmd/ptah@$PTAH_VERSION
      go build -ldflags '$ld' -o '$bin/ptah.tmp' $PTAH_MODULE/cmd/ptah && mv '$bin/ptah.tmp' '$bin/ptah'"
    return
  fi
  local got
  got=$(sha256sum "$archive" | cut -d' ' -f1)
  if [ "$got" != "$PTAH_ARCHIVE_SHA256" ]; then
    say "ptah: $archive has SHA-256 $got, but pins.env pins $PTAH_ARCHIVE_SHA256; refusing to build it"
    return 1
  fi
  local from=$PTAH_SUBSTITUTE_FROM to_mod=${PTAH_SUBSTITUTE_TO%@*}
  with_progress ptah bash -c "
    set -euo pipefail
    src=$root/src/ptah
    rm -rf \$src; mkdir -p \$src
    tar -xzf '$archive' -C \$src --strip-components=1
    cd \$src
    sed -i 's#\"$from\"#\"$to_mod\"#; s#\"$from/#\"$to_mod/#' dbschema/connection.go internal/dbschema/oracle/roles.go
    go mod edit -droprequire=$from -require=$PTAH_SUBSTITUTE_TO
    go build -mod=mod -ldflags '$ld' -o '$bin/ptah.tmp' ./cmd/ptah && mv '$bin/ptah.tmp' '$bin/ptah'"
  "$bin/ptah" --version >&2
}

# Flux's source-controller and kustomize-controller in one module (they
# share most dependencies), with the replaces docs/performance.md and
# ../shared/reference/go-tools.md explain, and their CRDs from the module zips.
build_flux() {
  use_set "$gitops_key"
  with_progress flux bash -c "
    set -euo pipefail
    $(declare -f tool_module); root=$root
    tool_module flux
    go mod edit -require=github.com/fluxcd/source-controller@$FLUX_SOURCE_VERSION -require=github.com/fluxcd/kustomize-controller@$FLUX_KUSTOMIZE_VERSION
    for r in $FLUX_ARTIFACT_REPLACE $FLUX_DIGEST_REPLACE $FLUX_YAML_REPLACE $FLUX_KUSTOMIZE_API_REPLACE $FLUX_KYAML_REPLACE; do
      go mod edit -replace=\$r
    done
    rm -rf '$root/bin.tmp'; mkdir -p '$root/bin.tmp'
    go build -mod=mod -ldflags '$strip' -o '$root/bin.tmp/' github.com/fluxcd/source-controller github.com/fluxcd/kustomize-controller
    mv '$root'/bin.tmp/* '$bin/'
    mods=\$(go env GOMODCACHE)/github.com/fluxcd
    rm -rf '$root/crds.tmp'; mkdir -p '$root/crds.tmp'
    cp \$mods/source-controller@$FLUX_SOURCE_VERSION/config/crd/bases/*.yaml \$mods/kustomize-controller@$FLUX_KUSTOMIZE_VERSION/config/crd/bases/*.yaml '$root/crds.tmp/'
    chmod u+w '$root'/crds.tmp/*.yaml
    mv '$root/crds.tmp' '$root/crds'"
}

# The checker around Argo CD's Lua health engine (conformance/tools/argocd-health).
build_argocd_health() {
  use_set "$gitops_key"
  with_progress argocd-health bash -c "
    set -euo pipefail
    $(declare -f tool_module); root=$root
    tool_module argocd-health
    cp '$here/argocd-health/main.go' .
    export GOTOOLCHAIN=$ARGOCD_GOTOOLCHAIN
    go mod edit -go=${ARGOCD_GOTOOLCHAIN#go} -require=github.com/argoproj/argo-cd/v3@$ARGOCD_VERSION
    go build -mod=mod -ldflags '$strip' -o '$bin/argocd-health.tmp' . && mv '$bin/argocd-health.tmp' '$bin/argocd-health'"
}

# Jaeger v2: the all-in-one backend the harness runs (OTLP in, memory
# storage, the query API out), configured by the YAML the harness writes.
build_jaeger() {
  use_set "$observability_key"
  build_simple jaeger github.com/jaegertracing/jaeger github.com/jaegertracing/jaeger/cmd/jaeger "$JAEGER_VERSION"
}

# Prometheus's promtool, for `promtool check metrics` on a scrape.
build_promtool() {
  use_set "$observability_key"
  # Without the service-discovery plugins (cloud SDKs) promtool does not
  # need to check an exposition: half its build time.
  build_simple promtool github.com/prometheus/prometheus github.com/prometheus/prometheus/cmd/promtool "$PROMETHEUS_VERSION" remove_all_sd
}

# Whether a tool is built and cached: the one check, so the build_*
# functions above are called only for what is missing.
is_built() {
  local c=$cache/$key/bin g=$cache/$gitops_key g2=$cache/$observability_key/bin
  case $1 in
    kubernetes) [ -x "$c/kube-apiserver" ] && [ -x "$c/kube-controller-manager" ] && [ -x "$c/kube-scheduler" ] ;;
    flux) [ -x "$g/bin/source-controller" ] && [ -x "$g/bin/kustomize-controller" ] && [ -d "$g/crds" ] ;;
    argocd-health) [ -x "$g/bin/argocd-health" ] ;;
    jaeger | promtool) [ -x "$g2/$1" ] ;;
    *) [ -x "$c/$1" ] ;;
  esac
}

build_one() {
  use_set "$key"
  case $1 in
    flux) build_flux ;;
    argocd-health) build_argocd_health ;;
    etcd) build_etcd ;;
    kubernetes) build_kubernetes kubernetes kube-apiserver kube-controller-manager kube-scheduler ;;
    kubectl) build_kubernetes kubectl kubectl ;;
    registry) build_simple registry github.com/distribution/distribution/v3 github.com/distribution/distribution/v3/cmd/registry "$DISTRIBUTION_VERSION" ;;
    cosign) build_simple cosign github.com/sigstore/cosign/v3 github.com/sigstore/cosign/v3/cmd/cosign "$COSIGN_VERSION" ;;
    helm) build_simple helm helm.sh/helm/v4 helm.sh/helm/v4/cmd/helm "$HELM_VERSION" ;;
    ptah) build_ptah ;;
    jaeger) build_jaeger ;;
    promtool) build_promtool ;;
  esac
}

if [ "${1:-}" = "--for" ]; then
  read -ra tools <<<"$(tools_for "${2:-}")"
else
  tools=("$@")
  [ ${#tools[@]} = 0 ] && read -ra tools <<<"$(tools_for test)"
fi
for t in "${tools[@]}"; do
  [ "$(expected_seconds "$t")" != 0 ] || { echo "unknown tool: $t" >&2; exit 2; }
done
say "cache: $cache ($key, $gitops_key, $observability_key)"
# What is left to build, and how long that took on 2 cores.
todo=() expect=0
for t in "${tools[@]}"; do
  if is_built "$t"; then continue; fi
  todo+=("$t"); expect=$((expect + $(expected_seconds "$t")))
done
if [ ${#todo[@]} = 0 ]; then
  say "all ${#tools[@]} tools cached (${tools[*]})"
else
  say "${#todo[@]} of ${#tools[@]} tools to build (${todo[*]}): about $((expect / 60)) min cold on 2 cores"
fi
# Builds run side by side where the cores allow (two cores a build); they
# share Go's build cache, so a package two tools use is compiled once.
jobs=${PTAH_TOOLS_JOBS:-$(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 ))}
times=$(mktemp -d)
trap 'rm -rf "$times"' EXIT
started=$SECONDS i=0 running=0 failed=0
for t in "${todo[@]}"; do
  i=$((i + 1))
  say "$t ($i/${#todo[@]}): building, about $(expected_seconds "$t") s cold on 2 cores; $((SECONDS - started)) s so far"
  ( s=$SECONDS; build_one "$t" && echo $((SECONDS - s)) >"$times/$t" ) &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
if [ ${#todo[@]} -gt 0 ]; then
  built=()
  for t in "${todo[@]}"; do
    [ -f "$times/$t" ] && built+=("$t $(cat "$times/$t") s")
  done
  say "built ${#built[@]} of ${#todo[@]} in $((SECONDS - started)) s: $(IFS=,; echo "${built[*]}" | sed 's/,/, /g')"
fi
[ $failed = 0 ] || { say "a tool build failed (above)"; exit 1; }
echo "$cache/$key/bin"
