/* The umbrella header compiles on its own and exposes the library. */
#include "meshtrain.h"
#include "testlib.h"

int main(void) {
    mt_model_config cfg;
    mt_error err;
    CHECK(mt_model_config_preset("gpt2", &cfg, &err) == 0, "%s", err.msg);
    mt_layout l;
    mt_model_layout_build(&cfg, 1, 0, &l);
    /* GPT-2 124M: 124,439,808 parameters; 124,475,904 with wte padded to 50304 rows */
    CHECK(l.total_params == 124475904u, "gpt2 has %zu parameters", l.total_params);
    mt_layout_free(&l);
    TEST_MAIN_END("test_public_header");
}
