/* libext2fs loaded on first use (ext2fs_dyn.h says why). */
#include "vmm/image/ext2fs_dyn.h"

#include <pthread.h>

#include "vmm/image/dyn.h"

#ifndef EXT2FS_SONAME
#define EXT2FS_SONAME "libext2fs.so.2"
#endif

/* Filled once under the once below, never written after: like the
 * dynamic linker's own tables, one per process. */
struct ext2fs_fns ext2fs_fns;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct img_dyn_state state;

/* Stringified here, before the header's macros could rename them. */
#define S(field, name) { offsetof(struct ext2fs_fns, field), #name }

static void load_once(void)
{
    static const struct img_dyn_sym syms[] = {
        S(initialize, ext2fs_initialize),
        S(allocate_tables, ext2fs_allocate_tables),
        S(close_free, ext2fs_close_free),
        S(free, ext2fs_free),
        S(init_csum_seed, ext2fs_init_csum_seed),
        S(mkdir, ext2fs_mkdir),
        S(new_inode, ext2fs_new_inode),
        S(write_new_inode, ext2fs_write_new_inode),
        S(read_inode_full, ext2fs_read_inode_full),
        S(write_inode_full, ext2fs_write_inode_full),
        S(link, ext2fs_link),
        S(unlink, ext2fs_unlink),
        S(lookup, ext2fs_lookup),
        S(follow_link, ext2fs_follow_link),
        S(expand_dir, ext2fs_expand_dir),
        S(inode_alloc_stats2, ext2fs_inode_alloc_stats2),
        S(extent_open2, ext2fs_extent_open2),
        S(extent_free, ext2fs_extent_free),
        S(file_open, ext2fs_file_open),
        S(file_write, ext2fs_file_write),
        S(file_llseek, ext2fs_file_llseek),
        S(file_set_size2, ext2fs_file_set_size2),
        S(file_close, ext2fs_file_close),
        S(punch, ext2fs_punch),
        S(dir_iterate2, ext2fs_dir_iterate2),
        S(xattrs_open, ext2fs_xattrs_open),
        S(xattrs_read, ext2fs_xattrs_read),
        S(xattr_set, ext2fs_xattr_set),
        S(xattrs_close, ext2fs_xattrs_close),
        S(free_ext_attr, ext2fs_free_ext_attr),
        S(inode_has_valid_blocks2, ext2fs_inode_has_valid_blocks2),
        S(bg_flags_set, ext2fs_bg_flags_set),
        S(group_desc_csum_set, ext2fs_group_desc_csum_set),
        S(set_gdt_csum, ext2fs_set_gdt_csum),
        S(com_error_message, error_message),
        S(init_error_table, initialize_ext2_error_table),
        S(unix_io_manager_p, unix_io_manager),
    };
    img_dyn_load(&state, EXT2FS_SONAME, "libext2fs2", syms, sizeof syms / sizeof syms[0], &ext2fs_fns);
    if (state.result == 0)
        ext2fs_fns.init_error_table();
}

int ext2fs_load(char *why, size_t len)
{
    pthread_once(&once, load_once);
    return img_dyn_result(&state, why, len);
}
