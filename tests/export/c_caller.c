/* A C program that uses an exported kiln model (tests/export): loads the weights that
 * test_export wrote, runs the model on its input and compares the outputs, byte for byte, with
 * what the C++ program computed. Usage: c_caller <dir> (weights.safetensors, x.f32 with 11 rows
 * of 20, logits.f32 and log_probs.f32 with 11 rows of 5). */
#include <kiln/export/kiln_model.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { rows = 11, cols = 20, classes = 5 };

static int read_floats(const char* dir, const char* file, float* out, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "c_caller: cannot open %s\n", path);
    return 0;
  }
  const size_t got = fread(out, sizeof(float), n, f);
  fclose(f);
  return got == n;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: c_caller <dir>\n");
    return 2;
  }
  if (kiln_abi_version() != KILN_ABI_VERSION) {
    fprintf(stderr, "c_caller: ABI %u, expected %d\n", kiln_abi_version(), KILN_ABI_VERSION);
    return 1;
  }
  static float x[rows * cols], want[2][rows * classes], got[2][rows * classes];
  if (!read_floats(argv[1], "x.f32", x, rows * cols) || !read_floats(argv[1], "logits.f32", want[0], rows * classes) ||
      !read_floats(argv[1], "log_probs.f32", want[1], rows * classes))
    return 1;
  kiln_model* model = NULL;
  char weights[4096];
  snprintf(weights, sizeof weights, "%s/weights.safetensors", argv[1]);
  if (kiln_model_create(&model) != KILN_OK || kiln_model_load(model, weights) != KILN_OK) {
    fprintf(stderr, "c_caller: %s\n", kiln_last_error());
    return 1;
  }
  const int64_t in_shape[2] = {rows, cols}, out_shape[2] = {rows, classes};
  const kiln_tensor input = {"x", KILN_F32, 2, in_shape, NULL, x};
  kiln_tensor outputs[2] = {{NULL, KILN_F32, 2, out_shape, NULL, got[0]}, {NULL, KILN_F32, 2, out_shape, NULL, got[1]}};
  int rc = kiln_model_run(model, &input, 1, outputs, 2);
  if (rc != KILN_OK) {
    fprintf(stderr, "c_caller: run: %d %s\n", rc, kiln_last_error());
    return 1;
  }
  /* and an error: an input with the wrong width names the input */
  const int64_t wide[2] = {rows, cols + 1};
  const kiln_tensor bad = {"x", KILN_F32, 2, wide, NULL, x};
  rc = kiln_model_run(model, &bad, 1, outputs, 2);
  if (rc != KILN_ERROR_SHAPE || !strstr(kiln_last_error(), "input 'x'")) {
    fprintf(stderr, "c_caller: a wrong shape gave %d '%s'\n", rc, kiln_last_error());
    return 1;
  }
  kiln_model_destroy(model);
  for (int q = 0; q < 2; ++q)
    if (memcmp(got[q], want[q], sizeof got[q]) != 0) {
      fprintf(stderr, "c_caller: output %d differs from the C++ program's\n", q);
      return 1;
    }
  printf("c_caller: %d rows, both outputs bit-identical to the C++ program's; logits[0] = %.9g\n", rows, got[0][0]);
  return 0;
}
