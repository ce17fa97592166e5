// Implementation of keras_graph.h: each layer's inputs from its inbound_nodes,
// then a walk from the input along single consumers, turning each tensor taken
// by two layers into a residual block (both paths followed to the Add that
// joins them). Every layer is taken once; one taken twice (a cycle, a shared
// layer) or never (off the path to the output) is an error.
#include "nn/keras_graph.h"

#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::nn::keras {
namespace {

using Json = nlohmann::json;

// Keras' inbound_nodes hold a few levels of lists and objects; deeper is not Keras'.
constexpr int kMaxNodeDepth = 32;
// Residual blocks inside residual blocks: far more than any model nests.
constexpr int kMaxBlockDepth = 64;

const Json* member(const Json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  const auto it = o.find(key);
  return it == o.end() ? nullptr : &*it;
}

GraphItem one_layer(size_t i) {
  GraphItem item;
  item.layer = i;
  return item;
}

class Graph {
 public:
  Graph(const Json& config, const Json& layers, std::string prefix)
      : config_(config), layers_(layers), prefix_(std::move(prefix)) {
    for (size_t i = 0; i < layers.size(); ++i) {
      Node node{layer_name(layers[i]), layers[i]["class_name"].get<std::string>(), {}};
      if (!index_.emplace(node.name, i).second)
        fail(where_of(node, i), "has the name of an earlier layer; each layer needs its own");
      nodes_.push_back(std::move(node));
    }
    for (size_t i = 0; i < layers.size(); ++i) read_inputs(i);
    taken_.assign(layers.size(), false);
  }

  std::vector<GraphItem> read() {
    if (!nodes_[0].inputs.empty())
      fail(where(0), str("takes ", quoted_inputs(0), ": a Functional model's first layer must be its input "
                                                    "(an InputLayer)"));
    take(0);
    std::vector<GraphItem> items{one_layer(0)};
    std::string end;
    for (GraphItem& item : follow(nodes_[0].name, end, 0)) items.push_back(std::move(item));
    if (const auto& after = consumers(end); !after.empty())
      fail(where(after[0]), str("adds ", quoted_inputs(after[0]), ": dtrain reads an Add only where it closes a "
                                "residual block, x + f(x), both inputs coming from one earlier layer's output"));
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (!taken_[i])
        fail(where(i), str("is not on the path from the input '", printable(nodes_[0].name), "' to the output '",
                           printable(end), "'; dtrain models have one input and one output"));
    check_output(end);
    return items;
  }

 private:
  struct Node {
    std::string name, type;
    std::vector<std::string> inputs;  // the layers whose outputs it takes, each once
  };

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw ConfigError(str(prefix_, ": ", where, " ", what));
  }

  static std::string where_of(const Node& node, size_t i) {
    return str("config.layers[", i, "] (", printable(node.type), " '", printable(node.name), "')");
  }
  std::string where(size_t i) const { return where_of(nodes_[i], i); }

  std::string quoted_inputs(size_t i) const {
    std::vector<std::string> names;
    for (const std::string& name : nodes_[i].inputs) names.push_back(str("'", printable(name), "'"));
    return names.empty() ? std::string("no input") : join(names, " and ");
  }

  const std::vector<size_t>& consumers(const std::string& tensor) const {
    static const std::vector<size_t> none;
    const auto it = consumers_.find(tensor);
    return it == consumers_.end() ? none : it->second;
  }

  void take(size_t i) {
    if (taken_[i])
      fail(where(i), "is reached twice: the graph has a cycle or a layer called on two inputs, which dtrain does "
                     "not read");
    taken_[i] = true;
  }

  void read_inputs(size_t i) {
    const Json* nodes = member(layers_[i], "inbound_nodes");
    if (!nodes) return;
    if (nodes->is_array() && nodes->size() > 1)
      fail(where(i), str("is called ", nodes->size(), " times (its weights shared); dtrain calls each layer once"));
    std::vector<std::string> names;
    collect_names(*nodes, 0, i, names);
    Node& node = nodes_[i];
    for (const std::string& name : names)
      if (std::find(node.inputs.begin(), node.inputs.end(), name) == node.inputs.end()) node.inputs.push_back(name);
    if (node.type == "Add" && names.size() != node.inputs.size())
      fail(where(i), str("adds '", printable(names[0]), "' to itself; dtrain's residual blocks add x and f(x)"));
    if (node.type == "Add" && names.size() != 2)
      fail(where(i), str("adds ", names.size(), " tensors (", quoted_inputs(i), "); dtrain's residual blocks add two"));
    if (node.type != "Add" && node.inputs.size() > 1)
      fail(where(i), node.type == "MultiHeadAttention"
                         ? str("attends across ", quoted_inputs(i), "; dtrain's MultiHeadAttention is "
                               "self-attention: query, key and value one tensor")
                         : str("takes ", quoted_inputs(i), "; dtrain's ", printable(node.type), " takes one input"));
    for (const std::string& name : node.inputs) {
      if (!index_.count(name))
        fail(where(i), str("takes '", printable(name), "', which is no layer of the model"));
      consumers_[name].push_back(i);
    }
  }

  // The layer names an inbound_nodes entry refers to (tf-keras: [[["name", 0, 0, {kwargs}]]];
  // Keras 3: [{"args": [{"class_name": "__keras_tensor__", "config": {"keras_history": ["name", 0, 0]}}]}]),
  // in order, repeats kept. A name that is not a string is named by its JSON text.
  void collect_names(const Json& j, int depth, size_t i, std::vector<std::string>& names) const {
    if (depth > kMaxNodeDepth)
      fail(where(i), str("has inbound_nodes nested deeper than ", kMaxNodeDepth, " levels, which is not what "
                         "Keras writes"));
    if (j.is_object()) {
      if (const Json* h = member(j, "keras_history"); h && h->is_array() && !h->empty())
        names.push_back((*h)[0].is_string() ? (*h)[0].get<std::string>() : (*h)[0].dump());
      for (const auto& [key, value] : j.items())
        if (key != "keras_history") collect_names(value, depth + 1, i, names);
    } else if (j.is_array()) {
      if (j.size() >= 3 && j[0].is_string() && j[1].is_number_integer() && j[2].is_number_integer()) {
        names.push_back(j[0].get<std::string>());
        if (j.size() >= 4) collect_names(j[3], depth + 1, i, names);  // tf-keras' kwargs: {"value": [...]}
        return;
      }
      for (const Json& e : j) collect_names(e, depth + 1, i, names);
    }
  }

  // The layers from `tensor` on, until a tensor no layer takes or whose only
  // consumer is an Add (the end of a block's path): its name goes to `end`.
  std::vector<GraphItem> follow(std::string tensor, std::string& end, int depth) {
    std::vector<GraphItem> items;
    for (;;) {
      const std::vector<size_t>& next = consumers(tensor);
      if (next.empty() || (next.size() == 1 && nodes_[next[0]].type == "Add")) {
        end = tensor;
        return items;
      }
      if (next.size() == 1) {
        take(next[0]);
        items.push_back(one_layer(next[0]));
      } else {
        items.push_back(block(tensor, next, depth + 1));
      }
      tensor = nodes_[items.back().layer].name;
    }
  }

  // The residual block that starts where `tensor` is taken by the two layers `next`.
  GraphItem block(const std::string& tensor, const std::vector<size_t>& next, int depth) {
    const size_t from = index_.at(tensor);
    if (next.size() > 2)
      fail(where(from), str("is taken by ", next.size(), " layers; dtrain reads a layer output taken by two only, as "
                            "the start of a residual block"));
    if (depth > kMaxBlockDepth) fail(where(from), str("starts residual blocks nested over ", kMaxBlockDepth, " deep"));
    std::vector<GraphItem> paths[2];
    std::string ends[2];
    size_t joins[2];
    for (int k = 0; k < 2; ++k) {
      const size_t first = next[k];
      ends[k] = tensor;
      joins[k] = first;  // the identity: the Add takes `tensor` itself
      if (nodes_[first].type != "Add") {
        take(first);
        paths[k].push_back(one_layer(first));
        for (GraphItem& item : follow(nodes_[first].name, ends[k], depth)) paths[k].push_back(std::move(item));
        if (consumers(ends[k]).empty())
          fail(where(first), str("starts a path from '", printable(tensor), "' that ends at '", printable(ends[k]),
                                 "' without an Add joining it back; dtrain reads a layer output taken by two "
                                 "layers only as a residual block"));
        joins[k] = consumers(ends[k])[0];
      }
    }
    if (joins[0] != joins[1])
      fail(where(joins[0]), str("closes one path from '", printable(tensor), "' but the other ends in ",
                                where(joins[1]), "; dtrain reads two paths from one output only when one Add joins "
                                "them"));
    const size_t add = joins[0];
    take(add);
    // The main path feeds the Add's first input, unless it is the identity.
    int main = nodes_[add].inputs[0] == ends[0] ? 0 : 1;
    if (paths[main].empty()) main = 1 - main;
    GraphItem item = one_layer(add);
    item.residual = true;
    item.layers = std::move(paths[main]);
    item.shortcut = std::move(paths[1 - main]);
    return item;
  }

  // config.output_layers names the layer the walk ended at.
  void check_output(const std::string& end) const {
    const Json* outputs = member(config_, "output_layers");
    std::vector<std::string> names;
    collect_names(outputs ? *outputs : Json::array(), 0, 0, names);
    if (names != std::vector<std::string>{end})
      throw ConfigError(str(prefix_, ": config.output_layers ", outputs ? printable(outputs->dump(), 60) : "(none)",
                            " is not the last layer '", printable(end), "' alone"));
  }

  const Json& config_;
  const Json& layers_;
  std::string prefix_;
  std::vector<Node> nodes_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::vector<size_t>> consumers_;
  std::vector<bool> taken_;
};

}  // namespace

std::string layer_name(const Json& layer) {
  for (const Json* o : {&layer, member(layer, "config")}) {
    const Json* name = o ? member(*o, "name") : nullptr;
    if (name && name->is_string()) return name->get<std::string>();
  }
  return "";
}

Json call_kwargs(const Json& layer) {
  Json kwargs = Json::object();
  const Json* nodes = member(layer, "inbound_nodes");
  if (!nodes || !nodes->is_array() || nodes->empty()) return kwargs;
  const Json& node = (*nodes)[0];
  if (const Json* k = member(node, "kwargs"); k && k->is_object()) return *k;  // Keras 3
  if (node.is_array())                                                         // tf-keras
    for (const Json& ref : node)
      if (ref.is_array() && ref.size() >= 4 && ref[3].is_object()) kwargs.update(ref[3]);
  return kwargs;
}

std::vector<GraphItem> read_functional_graph(const Json& config, const Json& layers, const std::string& error_prefix) {
  return Graph(config, layers, error_prefix).read();
}

}  // namespace dtrain::nn::keras
