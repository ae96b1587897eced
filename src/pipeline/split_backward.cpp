#include "split_backward.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "fsdpp/common/error.h"

namespace fsdpp::pipeline::detail {
namespace {

using torch::autograd::Edge;
using torch::autograd::Node;
using torch::autograd::variable_list;

// Nodes reachable from `root` (following next_edges), in post-order (children first).
std::vector<Node*> post_order(Node* root) {
  std::vector<Node*> order;
  std::unordered_set<Node*> seen{root};
  std::vector<std::pair<Node*, size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    const auto& edges = node->next_edges();
    if (next < edges.size()) {
      Node* child = edges[next++].function.get();
      if (child && seen.insert(child).second) stack.emplace_back(child, 0);
    } else {
      order.push_back(node);
      stack.pop_back();
    }
  }
  return order;
}

}  // namespace

// The gradients arriving at one node where weight paths leave the input's path, and the
// weights W reaches from it.
struct SplitBackward::Capture {
  std::shared_ptr<Node> node;
  std::vector<Edge> weight_edges;
  variable_list grads;
  bool captured = false;
};

namespace {
struct CaptureHook : torch::autograd::FunctionPreHook {
  explicit CaptureHook(std::weak_ptr<void> capture, variable_list* grads, bool* captured)
      : capture_(std::move(capture)), grads_(grads), captured_(captured) {}
  variable_list operator()(const variable_list& grads) override {
    // Only I's run is recorded; W's re-run of the node passes through untouched.
    if (auto alive = capture_.lock(); alive && !*captured_) {
      *grads_ = grads;
      *captured_ = true;
    }
    return grads;
  }
  std::weak_ptr<void> capture_;
  variable_list* grads_;
  bool* captured_;
};
}  // namespace

SplitBackward::SplitBackward(at::Tensor output, at::Tensor grad, at::Tensor input,
                             std::vector<at::Tensor> params)
    : output_(std::move(output)), grad_(std::move(grad)), params_(std::move(params)) {
  if (input.defined() && input.requires_grad()) input_ = std::move(input);
  const auto root = output_.grad_fn();
  FSDPP_CHECK(root, "[pipeline] a stage's output has no autograd history; nothing to backward");
  if (!input_.defined()) return;

  // X: nodes from which the input is reachable; P: nodes from which a weight is.
  namespace impl = torch::autograd::impl;
  Node* input_node = impl::gradient_edge(input_).function.get();
  std::unordered_map<Node*, Edge> weight_of;  // a weight's accumulator -> its edge
  for (const auto& p : params_) {
    if (!p.requires_grad()) continue;
    auto e = impl::gradient_edge(p);
    weight_of.emplace(e.function.get(), e);
  }
  const auto order = post_order(root.get());
  std::unordered_set<Node*> reaches_input, reaches_weight;
  // Per node, the weights reachable from it (small: a stage's parameters).
  std::unordered_map<Node*, std::unordered_set<Node*>> weights_below;
  for (Node* n : order) {
    auto& below = weights_below[n];
    if (n == input_node) reaches_input.insert(n);
    if (weight_of.count(n)) below.insert(n);
    for (const auto& e : n->next_edges()) {
      Node* c = e.function.get();
      if (!c) continue;
      if (reaches_input.count(c)) reaches_input.insert(n);
      const auto& cb = weights_below[c];
      below.insert(cb.begin(), cb.end());
    }
    if (!below.empty()) reaches_weight.insert(n);
  }
  // Where weight paths leave the input's: a node of X with a child outside X that leads to a
  // weight. W re-runs it towards the weights below those children.
  // Owning pointers: every node but the root is some node's child.
  std::unordered_map<Node*, std::shared_ptr<Node>> owner{{root.get(), root}};
  for (Node* n : order) {
    for (const auto& e : n->next_edges()) {
      if (e.function) owner.emplace(e.function.get(), e.function);
    }
  }
  bool splittable = true;
  std::unordered_set<Node*> covered;
  for (Node* n : order) {
    if (!reaches_input.count(n) || n == input_node) continue;
    std::unordered_set<Node*> via_off_path, via_path;
    for (const auto& e : n->next_edges()) {
      Node* c = e.function.get();
      if (!c || !reaches_weight.count(c)) continue;
      const auto& cb = weights_below[c];
      (reaches_input.count(c) ? via_path : via_off_path).insert(cb.begin(), cb.end());
    }
    if (via_off_path.empty()) continue;
    auto cap = std::make_shared<Capture>();
    cap->node = owner.at(n);
    for (Node* w : via_off_path) {
      if (via_path.count(w)) splittable = false;  // reused weight: see the header
      covered.insert(w);
      cap->weight_edges.push_back(weight_of.at(w));
    }
    captures_.push_back(std::move(cap));
  }
  // A weight that no capture reaches would get no gradient from W; W then runs whole.
  for (const auto& [acc, edge] : weight_of) {
    if (reaches_weight.count(acc) && weights_below[root.get()].count(acc) && !covered.count(acc)) {
      splittable = false;
    }
  }
  split_ = splittable;
  if (!split_) {
    captures_.clear();
    return;
  }
  for (auto& cap : captures_) {
    cap->node->add_pre_hook(std::make_unique<CaptureHook>(std::weak_ptr<void>(cap), &cap->grads,
                                                          &cap->captured));
  }
}

SplitBackward::~SplitBackward() = default;

at::Tensor SplitBackward::backward_input() {
  FSDPP_CHECK(!input_done_, "[pipeline] the input gradient of a microbatch was asked for twice");
  input_done_ = true;
  if (!input_.defined()) return {};
  auto g = torch::autograd::grad({output_}, {input_}, {grad_}, /*retain_graph=*/true,
                                 /*create_graph=*/false, /*allow_unused=*/true);
  return g.at(0);
}

void SplitBackward::backward_weight() {
  if (!input_done_) backward_input();
  std::vector<at::Tensor> weights;
  for (const auto& p : params_) {
    if (p.requires_grad()) weights.push_back(p);
  }
  if (weights.empty()) return;
  if (!input_.defined() || !split_) {
    // The whole backward, into the weights only (no input, or a weight used twice).
    torch::autograd::backward({output_}, {grad_}, /*retain_graph=*/false, /*create_graph=*/false,
                              weights);
  } else {
    auto& engine = torch::autograd::Engine::get_default_engine();
    for (auto& cap : captures_) {
      FSDPP_CHECK(cap->captured, "[pipeline] the input backward never reached node {}; the "
                  "weight gradient cannot be split from it", cap->node->name());
      torch::autograd::edge_list roots;
      variable_list grads;
      for (size_t i = 0; i < cap->grads.size(); ++i) {
        if (!cap->grads[i].defined()) continue;
        roots.emplace_back(cap->node, static_cast<uint32_t>(i));
        grads.push_back(cap->grads[i]);
      }
      if (roots.empty()) continue;
      engine.execute(roots, grads, /*keep_graph=*/true, /*create_graph=*/false,
                     /*accumulate_grad=*/true, cap->weight_edges);
    }
  }
  captures_.clear();
  output_ = at::Tensor();
  grad_ = at::Tensor();
  input_ = at::Tensor();
}

}  // namespace fsdpp::pipeline::detail
