/* libarchive loaded on first use (archive_dyn.h says why). */
#include "vmm/image/archive_dyn.h"

#include <pthread.h>

#include "vmm/image/dyn.h"

#ifndef ARCHIVE_SONAME
#define ARCHIVE_SONAME "libarchive.so.13"
#endif

/* Filled once under the once below, never written after: like the
 * dynamic linker's own tables, one per process. */
struct archive_fns archive_fns;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct img_dyn_state state;

/* Stringified here, before the header's macros could rename them. */
#define S(field, name) { offsetof(struct archive_fns, field), #name }

static void load_once(void)
{
    static const struct img_dyn_sym syms[] = {
        S(read_new, archive_read_new),
        S(read_support_filter_gzip, archive_read_support_filter_gzip),
        S(read_support_filter_zstd, archive_read_support_filter_zstd),
        S(read_support_filter_none, archive_read_support_filter_none),
        S(read_support_format_tar, archive_read_support_format_tar),
        S(read_open_filename, archive_read_open_filename),
        S(read_next_header, archive_read_next_header),
        S(read_data_block, archive_read_data_block),
        S(read_free, archive_read_free),
        S(error_string, archive_error_string),
        S(filter_bytes, archive_filter_bytes),
        S(entry_pathname, archive_entry_pathname),
        S(entry_filetype, archive_entry_filetype),
        S(entry_perm, archive_entry_perm),
        S(entry_uid, archive_entry_uid),
        S(entry_gid, archive_entry_gid),
        S(entry_mtime, archive_entry_mtime),
        S(entry_mtime_nsec, archive_entry_mtime_nsec),
        S(entry_mtime_is_set, archive_entry_mtime_is_set),
        S(entry_atime, archive_entry_atime),
        S(entry_atime_nsec, archive_entry_atime_nsec),
        S(entry_atime_is_set, archive_entry_atime_is_set),
        S(entry_ctime, archive_entry_ctime),
        S(entry_ctime_nsec, archive_entry_ctime_nsec),
        S(entry_ctime_is_set, archive_entry_ctime_is_set),
        S(entry_size, archive_entry_size),
        S(entry_size_is_set, archive_entry_size_is_set),
        S(entry_symlink, archive_entry_symlink),
        S(entry_hardlink, archive_entry_hardlink),
        S(entry_rdevmajor, archive_entry_rdevmajor),
        S(entry_rdevminor, archive_entry_rdevminor),
        S(entry_xattr_reset, archive_entry_xattr_reset),
        S(entry_xattr_next, archive_entry_xattr_next),
    };
    img_dyn_load(&state, ARCHIVE_SONAME, "libarchive13", syms, sizeof syms / sizeof syms[0], &archive_fns);
}

int archive_load(char *why, size_t len)
{
    pthread_once(&once, load_once);
    return img_dyn_result(&state, why, len);
}
