// SpareNodes: node handles taken out of a std::unordered_map, kept (up to a
// bound) so that later insertions reuse them instead of allocating. The
// tensor queue and the controller's pending table keep their finished nodes
// this way (docs/decisions.md, "Finished queue and pending nodes are kept
// for reuse"). Not thread-safe: its owner's lock or thread guards it.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace accord {

template <typename Map>
class SpareNodes {
 public:
  using Node = typename Map::node_type;
  static constexpr size_t kMax = 1024;

  bool empty() const { return nodes_.empty(); }
  // Keeps `node` if it holds one and fewer than kMax are kept (else it is
  // freed here); leaves `node` empty either way.
  void Keep(Node&& node) {
    if (node && nodes_.size() < kMax) nodes_.push_back(std::move(node));
    node = Node();
  }
  // A kept node, with the key and value it had. Not empty() first.
  Node Take() {
    Node node = std::move(nodes_.back());
    nodes_.pop_back();
    return node;
  }
  // Keeps every node of `other` there is room for, and empties it.
  void KeepAll(SpareNodes* other) {
    for (Node& node : other->nodes_) Keep(std::move(node));
    other->nodes_.clear();
  }

 private:
  std::vector<Node> nodes_;
};

}  // namespace accord
