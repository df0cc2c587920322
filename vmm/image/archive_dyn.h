/* libarchive, loaded when a layer is first read rather than when moat
 * starts (vmm/image/archive_dyn.c). Linked, it would bring its own
 * libraries (compressors, libxml2, nettle...) into every moat process; the
 * files that read tar streams include this header instead of <archive.h>:
 * each archive_ call below goes through the table archive_load() fills. */
#ifndef MOAT_IMAGE_ARCHIVE_DYN_H
#define MOAT_IMAGE_ARCHIVE_DYN_H

#include <stddef.h>
#include <archive.h>
#include <archive_entry.h>

struct archive_fns {
    __typeof__(&archive_read_new) read_new;
    __typeof__(&archive_read_support_filter_gzip) read_support_filter_gzip;
    __typeof__(&archive_read_support_filter_zstd) read_support_filter_zstd;
    __typeof__(&archive_read_support_filter_none) read_support_filter_none;
    __typeof__(&archive_read_support_format_tar) read_support_format_tar;
    __typeof__(&archive_read_open_filename) read_open_filename;
    __typeof__(&archive_read_next_header) read_next_header;
    __typeof__(&archive_read_data_block) read_data_block;
    __typeof__(&archive_read_free) read_free;
    __typeof__(&archive_error_string) error_string;
    __typeof__(&archive_filter_bytes) filter_bytes;
    __typeof__(&archive_entry_pathname) entry_pathname;
    __typeof__(&archive_entry_filetype) entry_filetype;
    __typeof__(&archive_entry_perm) entry_perm;
    __typeof__(&archive_entry_uid) entry_uid;
    __typeof__(&archive_entry_gid) entry_gid;
    __typeof__(&archive_entry_mtime) entry_mtime;
    __typeof__(&archive_entry_mtime_nsec) entry_mtime_nsec;
    __typeof__(&archive_entry_mtime_is_set) entry_mtime_is_set;
    __typeof__(&archive_entry_atime) entry_atime;
    __typeof__(&archive_entry_atime_nsec) entry_atime_nsec;
    __typeof__(&archive_entry_atime_is_set) entry_atime_is_set;
    __typeof__(&archive_entry_ctime) entry_ctime;
    __typeof__(&archive_entry_ctime_nsec) entry_ctime_nsec;
    __typeof__(&archive_entry_ctime_is_set) entry_ctime_is_set;
    __typeof__(&archive_entry_size) entry_size;
    __typeof__(&archive_entry_size_is_set) entry_size_is_set;
    __typeof__(&archive_entry_symlink) entry_symlink;
    __typeof__(&archive_entry_hardlink) entry_hardlink;
    __typeof__(&archive_entry_rdevmajor) entry_rdevmajor;
    __typeof__(&archive_entry_rdevminor) entry_rdevminor;
    __typeof__(&archive_entry_xattr_reset) entry_xattr_reset;
    __typeof__(&archive_entry_xattr_next) entry_xattr_next;
};

/* Load the library and resolve every function above, once per process
 * (later calls return the first result). 0, or -ENOENT/-ENOSYS with a
 * sentence in why (the library or one of its functions is missing). */
int archive_load(char *why, size_t len);

/* The table; valid once archive_load() returned 0, read-only after. */
extern struct archive_fns archive_fns;

#define archive_read_new (archive_fns.read_new)
#define archive_read_support_filter_gzip (archive_fns.read_support_filter_gzip)
#define archive_read_support_filter_zstd (archive_fns.read_support_filter_zstd)
#define archive_read_support_filter_none (archive_fns.read_support_filter_none)
#define archive_read_support_format_tar (archive_fns.read_support_format_tar)
#define archive_read_open_filename (archive_fns.read_open_filename)
#define archive_read_next_header (archive_fns.read_next_header)
#define archive_read_data_block (archive_fns.read_data_block)
#define archive_read_free (archive_fns.read_free)
#define archive_error_string (archive_fns.error_string)
#define archive_filter_bytes (archive_fns.filter_bytes)
#define archive_entry_pathname (archive_fns.entry_pathname)
#define archive_entry_filetype (archive_fns.entry_filetype)
#define archive_entry_perm (archive_fns.entry_perm)
#define archive_entry_uid (archive_fns.entry_uid)
#define archive_entry_gid (archive_fns.entry_gid)
#define archive_entry_mtime (archive_fns.entry_mtime)
#define archive_entry_mtime_nsec (archive_fns.entry_mtime_nsec)
#define archive_entry_mtime_is_set (archive_fns.entry_mtime_is_set)
#define archive_entry_atime (archive_fns.entry_atime)
#define archive_entry_atime_nsec (archive_fns.entry_atime_nsec)
#define archive_entry_atime_is_set (archive_fns.entry_atime_is_set)
#define archive_entry_ctime (archive_fns.entry_ctime)
#define archive_entry_ctime_nsec (archive_fns.entry_ctime_nsec)
#define archive_entry_ctime_is_set (archive_fns.entry_ctime_is_set)
#define archive_entry_size (archive_fns.entry_size)
#define archive_entry_size_is_set (archive_fns.entry_size_is_set)
#define archive_entry_symlink (archive_fns.entry_symlink)
#define archive_entry_hardlink (archive_fns.entry_hardlink)
#define archive_entry_rdevmajor (archive_fns.entry_rdevmajor)
#define archive_entry_rdevminor (archive_fns.entry_rdevminor)
#define archive_entry_xattr_reset (archive_fns.entry_xattr_reset)
#define archive_entry_xattr_next (archive_fns.entry_xattr_next)

#endif
