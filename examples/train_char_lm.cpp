// Trains a character-level GPT on the fortune-cookie corpus with kiln: a decoder-only
// transformer (token and learned positional embeddings, pre-norm causal blocks with fused
// attention and a GELU MLP, a final LayerNorm, a linear head), its loss, gradients and the
// AdamW update as one expression, compiled into one plan while this file compiles.
//
//   train_char_lm [--epochs N] [--steps S] [--batch B] [--lr LR] [--seed S] [--threads T]
//                 [--data DIR] [--save FILE] [--resume FILE] [--stop-after E] [--sample N] [--quiet]
//
// The text is every fortune file under /usr/share/games/fortunes (Debian's fortunes package),
// read in name order and joined; the first 90% of it by offset trains, the rest validates.
// Characters are bytes below 128 (others become '?'). An epoch is --steps batches of random
// windows; after each, the validation loss in bits per character over fixed windows. At the
// end a sample of generated text; the last line is val_bpc=<value>. --save writes a
// checkpoint after every epoch and --resume continues from one (--stop-after E ends a run after
// epoch E of --epochs, whose count the learning-rate schedule spans). The defaults (7 epochs of
// 200 steps, batch 32, lr 2e-3) are the run of bench/results/example-char-lm.md.
#include <kiln/nn/transformer.hpp>
#include <kiln/optim.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

using namespace kiln;

namespace {

// ---- the model: 4 layers, 4 heads, width 128, a context of 128 characters ---------------------
constexpr index_t vocab = 128, context = 128, width = 128, heads = 4, ff = 4 * width;
constexpr nn::attention_options block_opts{.causal = true, .norm_first = true, .gelu = true};
template <fixed_string Name>
using block = nn::transformer_encoder_layer<Name, width, heads, ff, block_opts>;

using tokens = nn::embedding<"wte", vocab, width>;
using positions = nn::positional_embedding<"wpe", context, width>;
using b0 = block<"h.0">;
using b1 = block<"h.1">;
using b2 = block<"h.2">;
using b3 = block<"h.3">;
using ln_f = nn::layer_norm<"ln_f", width>;
using head = nn::linear<"head", width, vocab>;
struct gpt {
  using params = nn::params_of<tokens, positions, b0, b1, b2, b3, ln_f, head>;
  static void init(nn::state_dict& sd, std::uint64_t seed) {
    tokens::init(sd, seed);
    // GPT-2's initial token embedding: normal(0, 0.02), not torch.nn.Embedding's normal(0, 1)
    nn::init::normal(sd.at("wte.weight"), 0.0, 0.02, seed, nn::stream_of("wte.weight"));
    positions::init(sd, seed);
    b0::init(sd, seed), b1::init(sd, seed), b2::init(sd, seed), b3::init(sd, seed);
    ln_f::init(sd, seed);
    head::init(sd, seed);
  }
};

using X = input<"x", i64, shape<dyn, context>>;  // a batch of windows
using Y = input<"y", i64, shape<dyn>>;           // the next character at every position, flattened

/// Logits [batch context, vocab] of the windows X.
template <bool Train>
constexpr auto logits_of() {
  const auto run = [](auto m, const auto& x) {
    if constexpr (Train) return decltype(m){}(x, nn::train);
    else return decltype(m){}(x);
  };
  const auto h0 = positions{}(tokens{}(X{}));
  const auto h = run(b3{}, run(b2{}, run(b1{}, run(b0{}, h0))));
  return reshape<dyn, vocab>(head{}(ln_f{}(h)));
}
constexpr auto loss = cross_entropy(logits_of<true>(), Y{});
constexpr auto logits = logits_of<false>();

// ---- data --------------------------------------------------------------------------------------
struct corpus {
  std::vector<std::int64_t> train, val;
};

corpus load(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir))
    throw std::runtime_error(dir + " is not a directory (Debian: apt-get install fortunes, or --data DIR)");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    const fs::path& p = e.path();
    // the text files: not the strfile indexes (.dat) nor the links to the UTF-8 copies (.u8)
    if (e.is_regular_file() && p.extension() != ".dat" && p.extension() != ".u8") files.push_back(p);
  }
  std::sort(files.begin(), files.end());
  std::vector<std::int64_t> text;
  for (const fs::path& p : files) {
    std::ifstream in(p, std::ios::binary);
    for (std::istreambuf_iterator<char> it(in), end; it != end; ++it) {
      const auto c = static_cast<unsigned char>(*it);
      text.push_back(c < vocab ? c : '?');
    }
  }
  if (text.size() < 20 * context) throw std::runtime_error("too little text under " + dir);
  const auto cut = static_cast<std::ptrdiff_t>(text.size() * 9 / 10);
  return {{text.begin(), text.begin() + cut}, {text.begin() + cut, text.end()}};
}

/// Batch `b` windows of `text` starting at `starts`: x the windows, y the characters after each.
void fill(const std::vector<std::int64_t>& text, const std::vector<std::size_t>& starts, any_tensor& x, any_tensor& y) {
  std::int64_t* xp = x.data<std::int64_t>();
  std::int64_t* yp = y.data<std::int64_t>();
  for (std::size_t i = 0; i < starts.size(); ++i) {
    std::memcpy(xp + i * context, text.data() + starts[i], context * sizeof(std::int64_t));
    std::memcpy(yp + i * context, text.data() + starts[i] + 1, context * sizeof(std::int64_t));
  }
}

struct options {
  int epochs = 7;
  index_t steps = 200, batch = 32;
  double lr = 2e-3;
  std::uint64_t seed = 1;
  int threads = 0;
  std::string data = "/usr/share/games/fortunes", save, resume;
  int stop_after = 0;  // end after this epoch (0: run all --epochs)
  int sample = 300;
  bool quiet = false;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "train_char_lm: %s\nusage: train_char_lm [--epochs N] [--steps S] [--batch B] [--lr LR] [--seed S] "
               "[--threads T] [--data DIR] [--save FILE] [--resume FILE] [--stop-after E] [--sample N] [--quiet]\n",
               why);
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quiet") {
      o.quiet = true;
      continue;
    }
    if (i + 1 >= argc) usage(("missing value after " + a).c_str());
    const std::string v = argv[++i];
    try {
      if (a == "--epochs") o.epochs = std::stoi(v);
      else if (a == "--steps") o.steps = std::stoll(v);
      else if (a == "--batch") o.batch = std::stoll(v);
      else if (a == "--lr") o.lr = std::stod(v);
      else if (a == "--seed") o.seed = std::stoull(v);
      else if (a == "--threads") o.threads = std::stoi(v);
      else if (a == "--data") o.data = v;
      else if (a == "--save") o.save = v;
      else if (a == "--resume") o.resume = v;
      else if (a == "--sample") o.sample = std::stoi(v);
      else if (a == "--stop-after") o.stop_after = std::stoi(v);
      else usage(("unknown option " + a).c_str());
    } catch (const std::logic_error&) {
      usage(("bad value '" + v + "' for " + a).c_str());
    }
  }
  if (o.epochs < 1 || o.steps < 1 || o.batch < 1 || o.lr <= 0 || o.sample < 0 || o.stop_after < 0)
    usage("epochs, steps, batch and lr must be positive");
  return o;
}

using param_set = nn::param_set<gpt::params>;

/// Mean cross-entropy over fixed windows of the validation text, in bits per character.
double val_bpc(const std::vector<std::int64_t>& text, const param_set& ps, index_t batch) {
  static const auto forward = compile(cross_entropy(logits, Y{}));
  const std::size_t windows = std::min<std::size_t>(256, (text.size() - 1) / context);
  std::vector<std::size_t> starts;
  double sum = 0;
  std::size_t counted = 0;
  for (std::size_t w = 0; w < windows; w += static_cast<std::size_t>(batch)) {
    starts.clear();
    for (std::size_t i = w; i < std::min(windows, w + static_cast<std::size_t>(batch)); ++i) starts.push_back(i * context);
    const auto n = static_cast<index_t>(starts.size());
    any_tensor x(dtype::i64, dims{n, context}), y(dtype::i64, dims{n * context});
    fill(text, starts, x, y);
    const tensor<float, 0> l = forward(X{} = x, Y{} = y, ps);
    sum += static_cast<double>(l()) * static_cast<double>(n);
    counted += starts.size();
  }
  return sum / static_cast<double>(counted) / std::log(2.0);
}

/// n characters after `prompt`, each drawn from the softmax of the last position's logits at
/// temperature 0.8 (the window: the last `context` characters, padded on the left with spaces).
std::string sample(const param_set& ps, std::string prompt, int n, std::uint64_t seed) {
  static const auto forward = compile(logits);
  const nn::philox r(seed, 0x53414d504c45ull);
  any_tensor x(dtype::i64, dims{1, context});
  for (int k = 0; k < n; ++k) {
    std::int64_t* xp = x.data<std::int64_t>();
    for (index_t i = 0; i < context; ++i) {
      const auto at = static_cast<std::ptrdiff_t>(prompt.size()) - context + i;
      xp[i] = at < 0 ? ' ' : static_cast<unsigned char>(prompt[static_cast<std::size_t>(at)]) % vocab;
    }
    const tensor<float, 2> z = forward(X{} = x, ps);
    double top = -1e30;
    for (index_t c = 0; c < vocab; ++c) top = std::max(top, static_cast<double>(z(context - 1, c)));
    std::vector<double> p(vocab);
    double total = 0;
    for (index_t c = 0; c < vocab; ++c) total += p[static_cast<std::size_t>(c)] = std::exp((z(context - 1, c) - top) / 0.8);
    double u = r.uniform(static_cast<std::uint64_t>(k)) * total;
    index_t pick = vocab - 1;
    for (index_t c = 0; c < vocab; ++c)
      if ((u -= p[static_cast<std::size_t>(c)]) <= 0) {
        pick = c;
        break;
      }
    prompt.push_back(static_cast<char>(pick));
  }
  return prompt;
}

int run(const options& o) {
  if (o.threads > 0) kiln::set_num_threads(o.threads);
  const corpus text = load(o.data);
  const index_t total = o.steps * o.epochs;
  const optim::cosine_schedule schedule{.lr = o.lr, .warmup = std::min<index_t>(100, total / 10), .total = total,
                                        .min_lr = o.lr / 10};
  optim::trainer tr(loss, gpt::params{}, optim::adamw{.lr = o.lr, .weight_decay = 0.01}, nn::make_params<gpt>(o.seed),
                    optim::clip_grad_norm{.max_norm = 1.0});
  tr.seed(o.seed);
  int first_epoch = 0;
  if (!o.resume.empty()) {
    const io::metadata_map md = tr.load(o.resume);
    first_epoch = md.count("epoch") ? std::stoi(md.at("epoch")) : 0;
    std::printf("resumed from %s at epoch %d (step %lld)\n", o.resume.c_str(), first_epoch, static_cast<long long>(tr.steps()));
  }
  std::printf("model: GPT, 4 layers, 4 heads, width %lld, context %lld, %lld parameters\n", static_cast<long long>(width),
              static_cast<long long>(context), static_cast<long long>(nn::parameter_count<gpt::params>()));
  std::printf("data: %zu training and %zu validation characters from %s; batch %lld, AdamW lr %g (cosine), %d threads\n",
              text.train.size(), text.val.size(), o.data.c_str(), static_cast<long long>(o.batch), o.lr, kiln::num_threads());

  any_tensor x(dtype::i64, dims{o.batch, context}), y(dtype::i64, dims{o.batch * context});
  std::vector<std::size_t> starts(static_cast<std::size_t>(o.batch));
  double bpc = 0;
  const int last_epoch = o.stop_after > 0 ? std::min(o.stop_after, o.epochs) : o.epochs;
  for (int epoch = first_epoch; epoch < last_epoch; ++epoch) {
    const auto t0 = std::chrono::steady_clock::now();
    double loss_sum = 0;
    for (index_t s = 0; s < o.steps; ++s) {
      // windows drawn from (seed, step): a resumed run draws the same ones
      const nn::philox r(o.seed, 0x57494e444f57ull + static_cast<std::uint64_t>(tr.steps()));
      for (std::size_t i = 0; i < starts.size(); ++i)
        starts[i] = static_cast<std::size_t>(r.below(i, text.train.size() - context - 1));
      fill(text.train, starts, x, y);
      tr.options().lr = schedule(tr.steps() + 1);
      loss_sum += tr.step(X{} = x, Y{} = y);
      if (!o.quiet && (s % 10 == 9 || s + 1 == o.steps)) {
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const int bar = 30, done = static_cast<int>(bar * (s + 1) / o.steps);
        std::fprintf(stderr, "\repoch %d/%d [%.*s%*s] loss %.3f  %.0f chars/s ", epoch + 1, o.epochs, done,
                     "==============================", bar - done, "", loss_sum / static_cast<double>(s + 1),
                     static_cast<double>((s + 1) * o.batch * context) / secs);
      }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bpc = val_bpc(text.val, tr.params(), o.batch);
    if (!o.quiet) std::fprintf(stderr, "\n");
    std::printf("epoch %d: train loss %.3f nats, validation %.3f bits/char, %.1f s\n", epoch + 1,
                loss_sum / static_cast<double>(o.steps), bpc, secs);
    if (!o.save.empty()) tr.save(o.save, {{"epoch", std::to_string(epoch + 1)}, {"seed", std::to_string(o.seed)}});
  }
  if (first_epoch >= last_epoch) bpc = val_bpc(text.val, tr.params(), o.batch);
  if (o.sample > 0) std::printf("sample:\n%s\n", sample(tr.params(), "Q: ", o.sample, o.seed).c_str());
  std::printf("val_bpc=%.4f\n", bpc);
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  return run(parse(argc, argv));
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_char_lm: %s\n", e.what());
  return 1;
}
