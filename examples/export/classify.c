/* Classifies Fashion-MNIST images with the exported MLP (libmnist_mlp.so) from plain C:
 *   classify <weights or checkpoint> <images.f32> <N> [<logits.f32>]
 * prints the predicted class of the first images; with logits.f32 (what predict, the C++
 * program, computed) it also requires the same logits, byte for byte. */
#include <kiln/export/kiln_model.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float* read_floats(const char* path, size_t n) {
  FILE* f = fopen(path, "rb");
  float* p = malloc(n * sizeof(float));
  if (!f || !p || fread(p, sizeof(float), n, f) != n) {
    fprintf(stderr, "classify: cannot read %zu floats from %s\n", n, path);
    exit(1);
  }
  fclose(f);
  return p;
}

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    fprintf(stderr, "usage: classify <weights> <images.f32> <N> [<logits.f32>]\n");
    return 2;
  }
  const int64_t n = atoll(argv[3]);
  kiln_model* model = NULL;
  if (kiln_abi_version() != KILN_ABI_VERSION || kiln_model_create(&model) != KILN_OK ||
      kiln_model_load(model, argv[1]) != KILN_OK) {
    fprintf(stderr, "classify: %s\n", kiln_last_error());
    return 1;
  }
  float* images = read_floats(argv[2], (size_t)n * 784);
  float* logits = malloc((size_t)n * 10 * sizeof(float));
  const int64_t in_shape[2] = {n, 784}, out_shape[2] = {n, 10};
  const kiln_tensor input = {"x", KILN_F32, 2, in_shape, NULL, images};
  kiln_tensor output = {NULL, KILN_F32, 2, out_shape, NULL, logits};
  if (kiln_model_run(model, &input, 1, &output, 1) != KILN_OK) {
    fprintf(stderr, "classify: %s\n", kiln_last_error());
    return 1;
  }
  printf("classify: predicted classes of the first images:");
  for (int64_t i = 0; i < n && i < 10; ++i) {
    int best = 0;
    for (int c = 1; c < 10; ++c)
      if (logits[i * 10 + c] > logits[i * 10 + best]) best = c;
    printf(" %d", best);
  }
  printf("\n");
  int rc = 0;
  if (argc == 5) {
    float* want = read_floats(argv[4], (size_t)n * 10);
    rc = memcmp(want, logits, (size_t)n * 10 * sizeof(float)) != 0;
    printf("classify: %lld logits %s the C++ program's\n", (long long)n * 10, rc ? "DIFFER from" : "are bit-identical to");
    free(want);
  }
  free(images);
  free(logits);
  kiln_model_destroy(model);
  return rc;
}
