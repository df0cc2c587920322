#!/bin/sh
# The image store (`moat image`, docs/images.md) on any host, no KVM: an OCI
# image layout made with umoci and a docker save archive made from it with
# skopeo, imported (folder and tar), listed, inspected, exported (folder and
# tar) and read back by skopeo, removed and pruned; a layout with a corrupt
# blob refused with a message and nothing of it kept. One PASS:/FAIL:/
# SKIPPED: line a check.
#
#   MOAT_BIN=build/moat tests/integration/image-store.sh
set -u
MOAT=${MOAT_BIN:-build/moat}
case $MOAT in /*) ;; *) MOAT=$PWD/$MOAT ;; esac
T=$(mktemp -d /tmp/moat-imgstore.XXXXXX)
fails=0
trap 'chmod -R u+w "$T" 2>/dev/null; rm -rf "$T"' EXIT INT TERM
SUITE=image-store
. "$(dirname "$0")/checks.sh"
need_tools umoci skopeo tar
export MOAT_HOME=$T/home
cd "$T" || exit 1
has() { printf '%s\n' "$1" | grep -q -- "$2"; }   # has TEXT PATTERN
blobs() { ls "$MOAT_HOME/images/blobs/sha256" 2>/dev/null | wc -l; }

# An image of two layers, made with umoci from files, and its docker archive.
{ umoci init --layout L && umoci new --image L:t &&
  umoci unpack --rootless --image L:t B && mkdir -p B/rootfs/etc B/rootfs/bin &&
  echo hello > B/rootfs/etc/hello && umoci repack --image L:t B && rm -rf B &&
  umoci unpack --rootless --image L:t B && echo more > B/rootfs/bin/more && umoci repack --image L:t B &&
  umoci config --image L:t --config.cmd /bin/more --config.env A=1 --config.workingdir /etc &&
  skopeo copy -q oci:L:t docker-archive:"$T/X.tar":example/name:v1 &&
  tar cf L.tar -C L .; } >"$T/make.log" 2>&1
check "umoci and skopeo made a layout and a docker archive" sh -c "[ -f L/index.json ] && [ -s X.tar ] && [ -s L.tar ]" ||
    { cat "$T/make.log"; exit 1; }

out=$("$MOAT" image import L 2>&1); rc=$?
check "a layout naming its image by tag only needs --tag (exit $rc)" has "$rc $out" "^1 .*give --tag"
check "import an OCI layout folder --tag localhost/app:1" sh -c "'$MOAT' image import L --tag localhost/app:1 >/dev/null"
check "import an OCI layout tar --tag reg.example:5000/team/app:2" sh -c "'$MOAT' image import L.tar --tag reg.example:5000/team/app:2 >/dev/null"
check "import a docker save archive: named by its RepoTags" sh -c "'$MOAT' image import X.tar | grep -q '^imported docker.io/example/name:v1 '"
ls=$("$MOAT" image ls)
check "ls lists the three" sh -c "echo '$ls' | grep -q '^localhost/app  *1 ' && echo '$ls' | grep -q '^reg.example:5000/team/app  *2 ' && echo '$ls' | grep -q '^example/name  *v1 '"
check "ls: the header" has "$ls" "^REPOSITORY  *TAG  *DIGEST  *SIZE  *CREATED"
check "ls --json is JSON with 3 entries" sh -c "'$MOAT' image ls --json | python3 -c 'import json,sys; assert len(json.load(sys.stdin)) == 3'"
check "inspect: the config as umoci wrote it" sh -c "'$MOAT' image inspect localhost/app:1 | python3 -c '
import json,sys
i = json.load(sys.stdin)[0]
c = i[\"config\"]
assert c[\"cmd\"] == [\"/bin/more\"] and \"A=1\" in c[\"env\"] and c[\"working_dir\"] == \"/etc\", c
assert len(i[\"layers\"]) == 2 and i[\"reference\"] == \"localhost/app:1\"'"
d=$("$MOAT" image ls --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["digest"])')
check "inspect by digest prefix" has "$("$MOAT" image inspect "$(echo "$d" | cut -c8-19)")" "\"digest\": \"$d\""
check "the docker archive's layers are stored as tars of their own digest" sh -c "'$MOAT' image inspect example/name:v1 | grep -q 'application/vnd.oci.image.layer.v1.tar\"'"

# Export: folder and tar, read back by skopeo; the tar imported again.
check "export to a folder" sh -c "'$MOAT' image export localhost/app:1 OUT >/dev/null"
check "skopeo inspect oci:OUT" sh -c "skopeo inspect oci:OUT | grep -q '\"Os\": \"linux\"'"
check "skopeo inspect oci:OUT:1 (the tag annotation)" sh -c "skopeo inspect oci:OUT:1 >/dev/null"
check "export to a tar" sh -c "'$MOAT' image export example/name:v1 OUT.tar >/dev/null"
check "skopeo inspect oci-archive:OUT.tar" sh -c "skopeo inspect oci-archive:OUT.tar | grep -q '\"Architecture\": \"amd64\"'"
check "export refuses a folder holding a layout" sh -c "! '$MOAT' image export localhost/app:1 OUT 2>/dev/null"
"$MOAT" image rm example/name:v1 >/dev/null
check "an exported tar imports again under its own name" sh -c "'$MOAT' image import OUT.tar | grep -q 'docker.io/example/name:v1'"

# A corrupt blob in a layout: refused, nothing of it kept.
cp -r L C && chmod -R u+w C
layer=$(python3 -c 'import json; m=json.load(open("C/index.json"))["manifests"][0]["digest"][7:]; print(json.load(open("C/blobs/sha256/"+m))["layers"][1]["digest"][7:])')
printf 'X' | dd of="C/blobs/sha256/$layer" bs=1 seek=20 conv=notrunc 2>/dev/null
"$MOAT" image rm localhost/app:1 reg.example:5000/team/app:2 >/dev/null
"$MOAT" image prune --grace 0 >/dev/null
before=$(blobs)
out=$("$MOAT" image import C --tag localhost/corrupt:1 2>&1); rc=$?
check "a corrupt layer is refused with why (exit $rc)" has "$rc $out" "^1 .*is corrupt: its content has digest"
check "nothing of it kept (blobs $before -> $(blobs))" [ "$(blobs)" = "$before" ]
check "no reference made" sh -c "! '$MOAT' image inspect localhost/corrupt:1 >/dev/null 2>&1"
out=$("$MOAT" image import "$T/nothing" 2>&1)
check "a missing path: a message" has "$out" "No such file"
echo garbage > bad.tar
out=$("$MOAT" image import bad.tar 2>&1)
check "not a tar: a message" has "$out" "not a tar archive"

# rm and prune: shared blobs stay while one reference reaches them.
"$MOAT" image import L --tag localhost/a:1 >/dev/null && "$MOAT" image import L --tag localhost/b:1 >/dev/null
n=$(blobs)
"$MOAT" image rm localhost/a:1 >/dev/null
"$MOAT" image prune --grace 0 >/dev/null
check "prune keeps the blobs localhost/b:1 still reaches ($n -> $(blobs))" [ "$(blobs)" = "$n" ]
check "prune keeps recent blobs by default" sh -c "'$MOAT' image rm localhost/b:1 >/dev/null && '$MOAT' image prune | grep -q '^removed 0 blobs' && [ \$(ls '$MOAT_HOME/images/blobs/sha256' | wc -l) = $n ]"
check "rm of a missing image fails" sh -c "! '$MOAT' image rm localhost/b:1 2>/dev/null"
check "prune --grace 0 removes what nothing reaches" sh -c "'$MOAT' image prune --grace 0 >/dev/null && [ \$(ls '$MOAT_HOME/images/blobs/sha256' | wc -l) = 4 ]"
check "ls: example/name:v1 only" sh -c "[ \$('$MOAT' image ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))') = 1 ]"
check "usage errors exit 2" sh -c "'$MOAT' image frob 2>/dev/null; [ \$? = 2 ]"
[ $fails = 0 ]
