/* Calls the model that the installed package's kiln_add_model exported (consumer_find_package). */
#include <consumer_model.h>

#include <stdio.h>

int main(void) {
  static const int64_t declared[] = CONSUMER_MODEL_INPUT_0_SHAPE;
  float x[3] = {1, 2, 3}, y[3] = {0, 0, 0};
  const int64_t shape[1] = {3};
  const kiln_tensor in = {CONSUMER_MODEL_INPUT_0_NAME, KILN_F32, 1, shape, NULL, x};
  kiln_tensor out = {NULL, KILN_F32, 1, shape, NULL, y};
  kiln_model* m = NULL;
  if (declared[0] != -1 || kiln_model_create(&m) != KILN_OK || kiln_model_run(m, &in, 1, &out, 1) != KILN_OK) {
    printf("caller: %s\n", kiln_last_error());
    return 1;
  }
  kiln_model_destroy(m);
  if (y[0] != 3 || y[1] != 5 || y[2] != 7) {
    printf("caller: got %g %g %g, want 3 5 7\n", y[0], y[1], y[2]);
    return 1;
  }
  printf("caller: ok\n");
  return 0;
}
