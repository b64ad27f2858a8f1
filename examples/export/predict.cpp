// The C++ side of the export example: the Fashion-MNIST MLP's logits for the first N test
// images, computed with kiln in this program from a checkpoint of train_fashion_mnist, written
// with the images for the C and Python callers to reproduce (classify.c, classify.py).
//   predict <checkpoint> <dataset dir> <N> <out dir>   writes images.f32, logits.f32 (raw f32)
#include <kiln/io/idx_gzip.hpp>
#include <kiln/io/safetensors.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "mnist_mlp.hpp"

using namespace kiln;

int main(int argc, char** argv) try {
  if (argc != 5) {
    std::fprintf(stderr, "usage: predict <checkpoint> <dataset dir> <N> <out dir>\n");
    return 2;
  }
  const std::string out = argv[4];
  const index_t n = std::stoll(argv[3]);
  const any_tensor all = io::read_idx(std::string(argv[2]) + "/t10k-images-idx3-ubyte.gz",
                                      {.to = f32, .scale = 1.0 / 255, .inflate = io::gunzip});
  const any_tensor x = all.reshape(dims{all.shape().e[0], 784}).slice(0, 0, n).clone();
  // the model's parameters from the checkpoint (which also holds Adam's moments)
  const io::tensor_map ckpt = io::load_safetensors(argv[1]);
  const auto e = mnist::logits();
  std::vector<feed> feeds{{"x", x}};
  for (const node& p : traced<decltype(e)>::value.nodes)
    if (p.o == op::param) feeds.push_back({p.label(), ckpt.at(std::string(p.label()))});
  const any_tensor logits = eval_all(e, std::span<const feed>(feeds))[0];
  for (const auto& [file, t] : {std::pair{"/images.f32", x}, std::pair{"/logits.f32", logits}}) {
    std::ofstream f(out + file, std::ios::binary);
    f.write(reinterpret_cast<const char*>(t.bytes()), static_cast<std::streamsize>(t.numel() * 4));
    if (!f) throw std::runtime_error("cannot write " + out + file);
  }
  std::printf("predict: logits of %lld test images written to %s\n", static_cast<long long>(n), out.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "predict: %s\n", e.what());
  return 1;
}
