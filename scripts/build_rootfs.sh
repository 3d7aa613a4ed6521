#!/usr/bin/env bash
# Build the sandbox root filesystem (debootstrap) and import it as a Docker image.
#
# Both sandbox backends run agent commands on this rootfs, never on the host's `/`:
# bwrap binds it read-only as `/`, docker runs the image imported from it.
# Idempotent: a rootfs whose tag (a hash of suite + packages) exists is reused.
#
# Usage: scripts/build_rootfs.sh [--flavor base|swe] [--print-tag] [--no-docker]
#        scripts/build_rootfs.sh --check-copies ROOTFS PROJECTS_YAML  # what the swe build refuses
# Env:   CLAWGYM_CACHE (default ~/.cache/clawgym), CLAWGYM_DEBIAN_MIRROR, CLAWGYM_DEBIAN_SUITE
#
# Flavors: `base` (rootfs/current, image clawgym-base:current) is what terminal tasks run
# on; `swe` (rootfs/swe-current, image clawgym-swe:current) adds what Python projects'
# test suites need (pytest, hypothesis, six), so SWE instances run their tests offline.
# The `swe` flavor must hold no copy of a project SWE instances are made from (a `diff`
# against it would show the fix): Debian's python3-pytest and python3-hypothesis depend on
# python3-more-itertools and python3-dateutil, which neither imports at run time (only
# hypothesis.extra.dateutil does), so those are purged after debootstrap, and the build
# fails if any project of envs/swe/projects.yaml is still importable from the rootfs.
set -euo pipefail

flavor=base
PURGE=""
if [ "${1:-}" = "--flavor" ]; then flavor="${2:-}"; shift 2; fi

# What terminal tasks need inside the sandbox. Changing this list changes the tag,
# so existing caches are rebuilt rather than silently reused.
PACKAGES="bash,coreutils,findutils,grep,sed,gawk,tar,gzip,bzip2,xz-utils,zip,unzip,file,bc,procps,psmisc,less,git,jq,sqlite3,python3,python3-venv,patch,diffutils,ca-certificates"
case "$flavor" in
  base) name=base; link=current ;;
  swe) name=swe; link=swe-current; PACKAGES="$PACKAGES,python3-pytest,python3-hypothesis,python3-six"
       PURGE="python3-more-itertools python3-dateutil" ;;
  *) echo "build_rootfs: unknown flavor '$flavor' (base or swe)" >&2; exit 2 ;;
esac

# The project copies in rootfs $1 for envs/swe/projects.yaml $2: each project's top-level
# modules (the last part of its `source` entries) and its distribution's metadata, in every
# site-packages and dist-packages folder. One path per line; nothing when there is none.
project_copies() {
  local modules dists dir m d
  modules=$(sed -n 's/^  source: \[\(.*\)\]/\1/p' "$2" | tr ',' '\n' | sed 's:.*/::; s/[ "'"'"']//g; s/\.py$//')
  dists=$(sed -n 's/^  distribution: *//p' "$2" | tr 'A-Z.-' 'a-z__')
  for dir in "$1"/usr/lib/python3*/*-packages "$1"/usr/local/lib/python3*/*-packages; do
    [ -d "$dir" ] || continue
    for m in $modules; do
      for path in "$dir/$m" "$dir/$m.py"; do [ -e "$path" ] && echo "${path#"$1"}"; done
    done
    for d in $dists; do
      find "$dir" -maxdepth 1 -iregex ".*/${d//_/[-_.]}-[^/]*\.\(dist\|egg\)-info" -printf "${dir#"$1"}/%f\n"
    done
  done
  return 0
}

if [ "${1:-}" = "--check-copies" ]; then project_copies "$2" "$3"; exit 0; fi

cache="${CLAWGYM_CACHE:-$HOME/.cache/clawgym}"
suite="${CLAWGYM_DEBIAN_SUITE:-$( . /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-bookworm}" || echo bookworm)}"
mirror="${CLAWGYM_DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
  # Take the mirror apt already uses: it is the one registry this machine reaches.
  mirror=$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
           | grep -oE 'https?://[^ ]+/debian/?' | grep -v security | head -n1 || true)
  mirror="${mirror:-http://deb.debian.org/debian}"
fi
tag=$(printf '%s|%s|v1%s' "$suite" "$PACKAGES" "${PURGE:+|purge $PURGE}" | sha256sum | cut -c1-12)
rootfs="$cache/rootfs/$name-$tag"
image="clawgym-$name:$tag"

if [ "${1:-}" = "--print-tag" ]; then echo "$tag"; exit 0; fi

if [ ! -x "$rootfs/bin/bash" ]; then
  command -v debootstrap >/dev/null || { echo "build_rootfs: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
  [ "$(id -u)" = 0 ] || { echo "build_rootfs: debootstrap needs root to build $rootfs" >&2; exit 1; }
  mkdir -p "$cache/rootfs"
  tmp="$cache/rootfs/.build-$tag-$$"
  rm -rf "$tmp"
  echo "build_rootfs: debootstrap $suite from $mirror into $rootfs (a few minutes, once)"
  debootstrap --variant=minbase --include="$PACKAGES" "$suite" "$tmp" "$mirror" > "$cache/rootfs/debootstrap-$tag.log" 2>&1 \
    || { echo "build_rootfs: debootstrap failed; see $cache/rootfs/debootstrap-$tag.log" >&2; tail -n 20 "$cache/rootfs/debootstrap-$tag.log" >&2; rm -rf "$tmp"; exit 1; }
  if [ -n "$PURGE" ]; then
    # shellcheck disable=SC2086  # a list of package names
    chroot "$tmp" dpkg --purge --force-depends $PURGE >> "$cache/rootfs/debootstrap-$tag.log" 2>&1 \
      || { echo "build_rootfs: could not purge $PURGE; see $cache/rootfs/debootstrap-$tag.log" >&2; rm -rf "$tmp"; exit 1; }
  fi
  if [ "$flavor" = swe ]; then
    projects="$(cd "$(dirname "$0")/.." && pwd)/envs/swe/projects.yaml"
    copies=$(project_copies "$tmp" "$projects")
    if [ -n "$copies" ]; then
      echo "build_rootfs: the swe rootfs holds a copy of a project under test (its diff would show the fix):" >&2
      echo "$copies" >&2
      echo "build_rootfs: purge the Debian package that installs it (PURGE above)" >&2
      rm -rf "$tmp"; exit 1
    fi
  fi
  # Mount points the sandboxes bind over; the rootfs itself is always read-only.
  mkdir -p "$tmp/workspace" "$tmp/tmp"
  chmod 1777 "$tmp/tmp"
  rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*
  echo "clawgym-sandbox" > "$tmp/etc/hostname"
  mv "$tmp" "$rootfs"
fi
ln -sfn "$name-$tag" "$cache/rootfs/$link"

if [ "${1:-}" != "--no-docker" ] && docker info >/dev/null 2>&1; then
  if ! docker image inspect "$image" >/dev/null 2>&1; then
    echo "build_rootfs: docker import -> $image"
    tar -C "$rootfs" -c . | docker import -c 'WORKDIR /workspace' -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$image" >/dev/null
  fi
  docker tag "$image" "clawgym-$name:current"
fi
echo "build_rootfs: ready ($rootfs${image:+, $image})"
