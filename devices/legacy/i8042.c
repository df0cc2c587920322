/* A minimal i8042 (devices/legacy/i8042.h). */
#include "devices/legacy/i8042.h"

#include <string.h>


void i8042_init(struct i8042 *k, const struct i8042_ops *ops, void *opaque)
{
    memset(k, 0, sizeof(*k));
    k->ops = ops;
    k->opaque = opaque;
}

static void i8042_data_read(void *opaque, uint64_t off, uint8_t *data, uint32_t len)
{
    memset(data, 0, len);   /* no keyboard: the output buffer holds 0 */
}

static void i8042_data_write(void *opaque, uint64_t off, const uint8_t *data, uint32_t len)
{
    /* bytes for the keyboard or a command parameter: nobody listens */
}

static void i8042_cmd_read(void *opaque, uint64_t off, uint8_t *data, uint32_t len)
{
    memset(data, 0, len);
    if (len >= 1 && off == 0)
        data[0] = I8042_STATUS;
}

static void i8042_cmd_write(void *opaque, uint64_t off, const uint8_t *data, uint32_t len)
{
    struct i8042 *k = opaque;
    if (len != 1 || off != 0)
        return;
    __atomic_store_n(&k->cmd, data[0], __ATOMIC_RELAXED);
    if (data[0] == I8042_CMD_RESET && k->ops && k->ops->reset)
        k->ops->reset(k->opaque);
}

const struct bus_ops i8042_data_ops = { i8042_data_read, i8042_data_write };
const struct bus_ops i8042_cmd_ops = { i8042_cmd_read, i8042_cmd_write };
