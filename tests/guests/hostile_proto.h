/* What the hostile virtio guest (vhostile.c) and its host side
 * (tests/integration/test_hostile.c) agree on. Plain C constants only.
 *
 * Devices (found by scanning the virtio-mmio slots for their device ids):
 * two virtio-blk drives — the first is attacked, the second (HV_SECTORS2
 * sectors, byte i = HV_PAT2(i)) is the companion — virtio-vsock, and
 * optionally virtio-net with the metadata service (`--net user,mmds`; its
 * ARP answer for 169.254.169.254 is the net companion; without a net
 * device the guest prints HV_NO_NET and skips those attacks). The
 * host listens on <uds>_HV_HOLD_PORT and accepts without reading (the
 * credit-overrun attack); no one listens on HV_DEAD_PORT.
 *
 * The guest runs every attack HV_ROUNDS times and prints, for each,
 *   "hv: NAME OUTCOME companion=ok|FAIL after=ok|FAIL\n"
 * OUTCOME is what the guest observed (never what it expected):
 *   dropped      the chain came back with used length 0, status untouched
 *   ioerr/unsupp the request came back with that status byte
 *   ok           the request succeeded
 *   needs_reset  the device set DEVICE_NEEDS_RESET (and served nothing)
 *   ignored      the register/feature write had no effect (read back)
 *   refused      FEATURES_OK or QueueReady did not stick
 *   rst          (vsock) the device answered with RST
 *   silent       (vsock, net) nothing came back
 *   reply        (net) the metadata address answered the ARP request
 *   timeout      nothing happened within the guest's wait
 * companion: the other devices served a request right after the attack
 * (a read of the second drive, checked; a vsock REQUEST to HV_DEAD_PORT
 * answered by RST; for net attacks both). after: the attacked device, reset and set up again,
 * served a request. "hv: round N\n" starts round N (1-based); the end is
 * HV_DONE, exit status HV_STATUS. "hv.rounds=N" (1..9) on the command line
 * replaces HV_ROUNDS. With "spin" on the command line it
 * prints HV_SPIN and spins with interrupts off on vCPU 0 while the other
 * vCPUs sit in HLT with interrupts off: only moat's --timeout ends it. */
#ifndef MOAT_GUEST_HOSTILE_PROTO_H
#define MOAT_GUEST_HOSTILE_PROTO_H

#define HV_SECTORS    64
#define HV_SECTORS2   16
#define HV_PAT(i)     ((unsigned char)((i) * 13u + 1u))
#define HV_PAT2(i)    ((unsigned char)((i) * 7u + 5u))
#define HV_HOLD_PORT  1234
#define HV_DEAD_PORT  4242
#define HV_ROUNDS     3
#define HV_DONE       "hv: done\n"
#define HV_SPIN       "hv: spinning\n"
#define HV_STATUS     9
#define HV_NO_NET     "hv: no net device\n"

#endif
