# Load and lifetime in L1 (load.host copies test_load in only on hosts
# where make test's load layer could not run it): 20 VMs in one process,
# 20 moat processes, 100 create/start/stop/destroy cycles with descriptors
# unchanged and RSS growth <= 1 MiB after warm-up.
if [ -x build/tests/test_load ]; then
    t load env MOAT_LOAD_CYCLES=100 MOAT_REQUIRE_KVM=1 MOAT_GUESTS=build/guests MOAT_BIN=build/moat build/tests/test_load
else
    echo "load: not in L1: make test's load layer ran test_load on this host's own KVM"
fi
