/* libext2fs (and com_err's error_message, resolved through it), loaded
 * when a root filesystem is first built rather than when moat starts
 * (vmm/image/ext2fs_dyn.c). The files that write ext4 images include this
 * header instead of <ext2fs/ext2fs.h>: each call below goes through the
 * table ext2fs_load() fills. ext2fs.h's inline helpers are not used (an
 * out-of-line copy would reference the library directly). */
#ifndef MOAT_IMAGE_EXT2FS_DYN_H
#define MOAT_IMAGE_EXT2FS_DYN_H

#include <stddef.h>
#include <ext2fs/ext2fs.h>
#include <et/com_err.h>

struct ext2fs_fns {
    __typeof__(&ext2fs_initialize) initialize;
    __typeof__(&ext2fs_allocate_tables) allocate_tables;
    __typeof__(&ext2fs_close_free) close_free;
    __typeof__(&ext2fs_free) free;
    __typeof__(&ext2fs_init_csum_seed) init_csum_seed;
    __typeof__(&ext2fs_mkdir) mkdir;
    __typeof__(&ext2fs_new_inode) new_inode;
    __typeof__(&ext2fs_write_new_inode) write_new_inode;
    __typeof__(&ext2fs_read_inode_full) read_inode_full;
    __typeof__(&ext2fs_write_inode_full) write_inode_full;
    __typeof__(&ext2fs_link) link;
    __typeof__(&ext2fs_unlink) unlink;
    __typeof__(&ext2fs_lookup) lookup;
    __typeof__(&ext2fs_follow_link) follow_link;
    __typeof__(&ext2fs_expand_dir) expand_dir;
    __typeof__(&ext2fs_inode_alloc_stats2) inode_alloc_stats2;
    __typeof__(&ext2fs_extent_open2) extent_open2;
    __typeof__(&ext2fs_extent_free) extent_free;
    __typeof__(&ext2fs_file_open) file_open;
    __typeof__(&ext2fs_file_write) file_write;
    __typeof__(&ext2fs_file_llseek) file_llseek;
    __typeof__(&ext2fs_file_set_size2) file_set_size2;
    __typeof__(&ext2fs_file_close) file_close;
    __typeof__(&ext2fs_punch) punch;
    __typeof__(&ext2fs_dir_iterate2) dir_iterate2;
    __typeof__(&ext2fs_xattrs_open) xattrs_open;
    __typeof__(&ext2fs_xattrs_read) xattrs_read;
    __typeof__(&ext2fs_xattr_set) xattr_set;
    __typeof__(&ext2fs_xattrs_close) xattrs_close;
    __typeof__(&ext2fs_free_ext_attr) free_ext_attr;
    __typeof__(&ext2fs_inode_has_valid_blocks2) inode_has_valid_blocks2;
    __typeof__(&ext2fs_bg_flags_set) bg_flags_set;
    __typeof__(&ext2fs_group_desc_csum_set) group_desc_csum_set;
    __typeof__(&ext2fs_set_gdt_csum) set_gdt_csum;
    __typeof__(&error_message) com_error_message;
    /* libext2fs's messages registered with com_err: without it (the
     * library is dlopen'ed, so its constructor-less table is never added)
     * error_message() says "Unknown code ext2 N". */
    void (*init_error_table)(void);
    io_manager *unix_io_manager_p;
};

/* Load the library and resolve every function above, once per process
 * (later calls return the first result). 0, or -ENOENT/-ENOSYS with a
 * sentence in why (the library or one of its functions is missing). */
int ext2fs_load(char *why, size_t len);

/* The table; valid once ext2fs_load() returned 0, read-only after. */
extern struct ext2fs_fns ext2fs_fns;

#define ext2fs_initialize (ext2fs_fns.initialize)
#define ext2fs_allocate_tables (ext2fs_fns.allocate_tables)
#define ext2fs_close_free (ext2fs_fns.close_free)
#define ext2fs_free (ext2fs_fns.free)
#define ext2fs_init_csum_seed (ext2fs_fns.init_csum_seed)
#define ext2fs_mkdir (ext2fs_fns.mkdir)
#define ext2fs_new_inode (ext2fs_fns.new_inode)
#define ext2fs_write_new_inode (ext2fs_fns.write_new_inode)
#define ext2fs_read_inode_full (ext2fs_fns.read_inode_full)
#define ext2fs_write_inode_full (ext2fs_fns.write_inode_full)
#define ext2fs_link (ext2fs_fns.link)
#define ext2fs_unlink (ext2fs_fns.unlink)
#define ext2fs_lookup (ext2fs_fns.lookup)
#define ext2fs_follow_link (ext2fs_fns.follow_link)
#define ext2fs_expand_dir (ext2fs_fns.expand_dir)
#define ext2fs_inode_alloc_stats2 (ext2fs_fns.inode_alloc_stats2)
#define ext2fs_extent_open2 (ext2fs_fns.extent_open2)
#define ext2fs_extent_free (ext2fs_fns.extent_free)
#define ext2fs_file_open (ext2fs_fns.file_open)
#define ext2fs_file_write (ext2fs_fns.file_write)
#define ext2fs_file_llseek (ext2fs_fns.file_llseek)
#define ext2fs_file_set_size2 (ext2fs_fns.file_set_size2)
#define ext2fs_file_close (ext2fs_fns.file_close)
#define ext2fs_punch (ext2fs_fns.punch)
#define ext2fs_dir_iterate2 (ext2fs_fns.dir_iterate2)
#define ext2fs_xattrs_open (ext2fs_fns.xattrs_open)
#define ext2fs_xattrs_read (ext2fs_fns.xattrs_read)
#define ext2fs_xattr_set (ext2fs_fns.xattr_set)
#define ext2fs_xattrs_close (ext2fs_fns.xattrs_close)
#define ext2fs_free_ext_attr (ext2fs_fns.free_ext_attr)
#define ext2fs_inode_has_valid_blocks2 (ext2fs_fns.inode_has_valid_blocks2)
#define ext2fs_bg_flags_set (ext2fs_fns.bg_flags_set)
#define ext2fs_group_desc_csum_set (ext2fs_fns.group_desc_csum_set)
#define ext2fs_set_gdt_csum (ext2fs_fns.set_gdt_csum)
#define error_message (ext2fs_fns.com_error_message)
#define unix_io_manager (*ext2fs_fns.unix_io_manager_p)

#endif
