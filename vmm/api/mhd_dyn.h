/* libmicrohttpd, loaded when an HTTP server starts rather than when moat
 * starts (vmm/api/mhd_dyn.c).
 *
 * Linked at build time it brings GnuTLS and nine more shared libraries into
 * every moat process: 1.2 ms of loading and relocation per process on a PVM
 * host, paid by each `moat restore`, fork child and `moat start` that never
 * serves HTTP. The files that do (moat vmm's API, moat serve, its envd
 * server) include this header instead of <microhttpd.h>: each MHD_ call
 * below goes through the table mhd_load() fills, and each server start
 * calls mhd_load() first. */
#ifndef MOAT_CLI_MHD_DYN_H
#define MOAT_CLI_MHD_DYN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <microhttpd.h>

struct mhd_fns {
    __typeof__(&MHD_start_daemon) start_daemon;
    __typeof__(&MHD_stop_daemon) stop_daemon;
    __typeof__(&MHD_run) run;
    __typeof__(&MHD_get_timeout) get_timeout;
    __typeof__(&MHD_get_daemon_info) get_daemon_info;
    __typeof__(&MHD_get_connection_info) get_connection_info;
    __typeof__(&MHD_get_connection_values) get_connection_values;
    __typeof__(&MHD_lookup_connection_value) lookup_connection_value;
    __typeof__(&MHD_create_response_from_buffer) create_response_from_buffer;
    __typeof__(&MHD_create_response_from_callback) create_response_from_callback;
    __typeof__(&MHD_add_response_header) add_response_header;
    __typeof__(&MHD_queue_response) queue_response;
    __typeof__(&MHD_destroy_response) destroy_response;
    __typeof__(&MHD_create_post_processor) create_post_processor;
    __typeof__(&MHD_post_process) post_process;
    __typeof__(&MHD_destroy_post_processor) destroy_post_processor;
};

/* Load the library and resolve every function above, once per process
 * (later calls return the first result). 0, or -ENOENT/-ENOSYS with a
 * sentence in why (the library or one of its functions is missing). */
int mhd_load(char *why, size_t len);

/* The table; valid once mhd_load() returned 0, read-only after. */
extern struct mhd_fns mhd_fns;

#define MHD_start_daemon (mhd_fns.start_daemon)
#define MHD_stop_daemon (mhd_fns.stop_daemon)
#define MHD_run (mhd_fns.run)
#define MHD_get_timeout (mhd_fns.get_timeout)
#define MHD_get_daemon_info (mhd_fns.get_daemon_info)
#define MHD_get_connection_info (mhd_fns.get_connection_info)
#define MHD_get_connection_values (mhd_fns.get_connection_values)
#define MHD_lookup_connection_value (mhd_fns.lookup_connection_value)
#define MHD_create_response_from_buffer (mhd_fns.create_response_from_buffer)
#define MHD_create_response_from_callback (mhd_fns.create_response_from_callback)
#define MHD_add_response_header (mhd_fns.add_response_header)
#define MHD_queue_response (mhd_fns.queue_response)
#define MHD_destroy_response (mhd_fns.destroy_response)
#define MHD_create_post_processor (mhd_fns.create_post_processor)
#define MHD_post_process (mhd_fns.post_process)
#define MHD_destroy_post_processor (mhd_fns.destroy_post_processor)

#endif
