/* The moat CLI's internals, shared by its files (vmm/cli/cli*.c): the
 * shared helpers (cli_util.h), the agent target's options, the control
 * socket's server (vmm/api/control/), and
 * one entry point per command (main's table, cli.c, names them). Only the
 * CLI calls exit(). */
#ifndef MOAT_CLI_H
#define MOAT_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "vmm/sandbox/sandbox.h"
#include "vmm/cli/cli_util.h"
#include "vmm/api/control/ctl_server.h"

/* exec/cp's --vsock/--unix/--port/--wait at argv[*i] into t (an agent
 * endpoint, vmm/sandbox/exec.h): 1 if consumed, 0 if not ours, -1 on a
 * usage error (printed). */
struct sbx_agent_target;
int agent_target_opt(struct sbx_agent_target *t, int argc, char **argv, int *i);

/* --control PATH: the VM's control socket, served from the run loop
 * (vmm/api/control/vmrun.h), is an API server (vmm/api/control/ctl_server.h);
 * docs/control-socket.md. */
struct moat_vm;

/* Sandboxes (vmm/cli/cli_sandbox.c, docs/sandboxes.md). */
int cmd_sandbox(int argc, char **argv);
/* sandbox_exists, sandbox_state_name and the rest of the sandbox store:
 * vmm/sandbox/sandbox.h. */
/* mkdir -p PATH with MODE for each directory it creates: 0 or -errno. */
int cli_mkdir_p(const char *path, mode_t mode);
/* $MOAT_HOME, or its default (docs/sandboxes.md); -1 after printing why. */
int cli_moat_home(char *buf, size_t len);

/* Commands: argv[0] is the command name. */
int cmd_run(int argc, char **argv);
int cmd_restore(int argc, char **argv);
int cmd_device(int argc, char **argv);
int cmd_disk(int argc, char **argv);     /* vmm/cli/cli_disk.c: copy-on-write overlays */
int cmd_exec(int argc, char **argv);
int cmd_cp(int argc, char **argv);
int cmd_seccomp(int argc, char **argv);  /* vmm/cli/cli_seccomp.c: the seccomp lists */
int cmd_host(int argc, char **argv);     /* vmm/cli/cli_host.c: what this host can run */
/* vmm/cli/cli_fc.c: Firecracker's command line (docs/control-api.md; the
 * server is vmm/api/firecracker/);
 * also what main runs when argv[0]'s name is "firecracker". */
int cmd_vmm(int argc, char **argv);
int cmd_jail(int argc, char **argv);     /* vmm/cli/cli_jail.c: run moat confined */
int cmd_serve(int argc, char **argv);    /* vmm/cli/serve_main.c: the E2B-compatible server */
int cmd_image(int argc, char **argv);    /* vmm/cli/cli_image.c: the image store */

#endif
