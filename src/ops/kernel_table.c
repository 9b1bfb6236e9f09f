#include "ops/kernel_table.h"
#include "core/error.h"

void mt_kernel_missing(const mt_backend *be, const char *name) {
    mt_die("op_%s has no kernel on the %s backend yet: run this on {device} cpu, or add the kernel to its table", name,
           mt_device_kind_name(be->kind));
}
