// ChatTemplate (chat_template.hpp): a checkpoint's chat template through
// Jinja2 in an embedded Python interpreter.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <statickv/text/chat_template.hpp>
#include <statickv/text/tokenizer.hpp>

#include "json_file.hpp"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <stdexcept>

namespace statickv::tokenizer {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The environment transformers 5.24 renders chat templates in
// (utils/chat_template_utils.py), rebuilt on Jinja2 alone. Messages arrive
// as JSON text, so they are plain data already.
constexpr const char* kRenderer = R"PY(
import json
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


class _Generation(jinja2.ext.Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


class _Namespace(jinja2.utils.Namespace):
    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} starts with '_'")


def compile_template(source):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.globals["namespace"] = _Namespace
    return env.from_string(source)


def render(template, messages_json, add_generation_prompt, specials_json):
    messages = json.loads(messages_json)
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise TypeError("messages: expected a JSON array of objects")
    return template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                           **json.loads(specials_json))
)PY";

/// The interpreter's Python: STATICKV_PYTHON, else the configured one.
std::string python_executable() {
  if (const char* env = std::getenv("STATICKV_PYTHON"); env != nullptr && *env != '\0') return env;
  return STATICKV_CHAT_PYTHON;
}

/// The message of the Python exception now set (and clears it).
std::string python_error() {
  PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
  PyErr_Fetch(&type, &value, &trace);
  PyErr_NormalizeException(&type, &value, &trace);
  std::string what = "unknown Python error";
  if (value != nullptr) {
    PyObject* name =
        PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(value)), "__name__");
    PyObject* text = PyObject_Str(value);
    if (name != nullptr && text != nullptr) {
      what = std::string(PyUnicode_AsUTF8(name)) + ": " + PyUnicode_AsUTF8(text);
    }
    Py_XDECREF(name);
    Py_XDECREF(text);
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(trace);
  return what;
}

/// Holds Python's lock for a scope (any thread).
class Gil {
 public:
  Gil() : state_(PyGILState_Ensure()) {}
  ~Gil() { PyGILState_Release(state_); }
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

 private:
  PyGILState_STATE state_;
};

/// The renderer module's namespace (a borrowed reference kept for the
/// process), the interpreter started on the first call.
PyObject* renderer() {
  static PyObject* globals = nullptr;
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    if (!Py_IsInitialized()) {
      PyConfig config;
      PyConfig_InitPythonConfig(&config);
      config.install_signal_handlers = 0;
      config.parse_argv = 0;
      PyConfig_SetBytesString(&config, &config.program_name, python_executable().c_str());
      const PyStatus status = Py_InitializeFromConfig(&config);
      PyConfig_Clear(&config);
      if (PyStatus_Exception(status)) {
        failure = std::string("could not start Python ") + python_executable() + ": " +
                  (status.err_msg != nullptr ? status.err_msg : "unknown error");
        return;
      }
      PyEval_SaveThread();  // every use takes the lock through Gil
    }
    Gil gil;
    PyObject* dict = PyDict_New();
    PyDict_SetItemString(dict, "__builtins__", PyEval_GetBuiltins());
    PyObject* done = PyRun_String(kRenderer, Py_file_input, dict, dict);
    if (done == nullptr) {
      failure = "chat templates need jinja2 in " + python_executable() +
                "'s environment (scripts/setup.sh installs it): " + python_error();
      Py_DECREF(dict);
      return;
    }
    Py_DECREF(done);
    globals = dict;
  });
  if (globals == nullptr) throw std::runtime_error(failure);
  return globals;
}

/// tokenizer_config.json, or an empty object when the checkpoint has none.
json read_config(const fs::path& path) {
  return fs::exists(path) ? detail::read_json(path) : json::object();
}

/// tokenizer_config.json's "chat_template": a string, or the "default" of
/// a list of named templates; empty when it has none.
std::string config_template(const json& config, const fs::path& path) {
  if (!config.contains("chat_template")) return "";
  const json& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    for (const json& named : t) {
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string()) {
        return named["template"].get<std::string>();
      }
    }
  }
  detail::reader(path).refuse("chat_template",
                              "a string or a list of {name, template} with a \"default\" one", t);
}

/// The special tokens the template sees (transformers' special_tokens_map):
/// each a string or an added-token object {"content": ...}.
json special_tokens(const json& config) {
  json out = json::object();
  for (const char* name : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token",
                           "cls_token", "mask_token"}) {
    if (!config.contains(name)) continue;
    const json& v = config[name];
    if (v.is_string()) out[name] = v;
    if (v.is_object() && v.contains("content") && v["content"].is_string()) {
      out[name] = v["content"];
    }
  }
  return out;
}

/// A new reference to a Python str of `text` (throws on bad UTF-8).
PyObject* py_str(const std::string& text, const char* what) {
  PyObject* s = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "strict");
  if (s == nullptr) throw std::runtime_error(std::string(what) + ": " + python_error());
  return s;
}

}  // namespace

struct ChatTemplate::Impl {
  std::string source;    // the file the template came from
  std::string specials;  // JSON object of the special tokens
  PyObject* compiled = nullptr;
  ~Impl() {
    if (compiled == nullptr) return;
    Gil gil;
    Py_DECREF(compiled);
  }
};

bool ChatTemplate::available(const std::string& dir) {
  const fs::path root(dir);
  if (fs::exists(root / "chat_template.jinja")) return true;
  const fs::path config = root / "tokenizer_config.json";
  return read_config(config).contains("chat_template");
}

ChatTemplate ChatTemplate::load(const std::string& dir) {
  const fs::path root(dir), jinja = root / "chat_template.jinja",
                            config_path = root / "tokenizer_config.json";
  const json config = read_config(config_path);
  auto impl = std::make_unique<Impl>();
  std::string text;
  if (fs::exists(jinja)) {
    text = detail::read_file(jinja), impl->source = jinja.string();
  } else {
    text = config_template(config, config_path), impl->source = config_path.string();
  }
  if (text.empty()) {
    throw std::runtime_error("chat template: expected " + jinja.string() +
                             " or a chat_template in " + config_path.string() +
                             " but found neither");
  }
  impl->specials = special_tokens(config).dump();
  PyObject* globals = renderer();
  Gil gil;
  PyObject* source = py_str(text, impl->source.c_str());
  PyObject* compiled = PyObject_CallFunctionObjArgs(
      PyDict_GetItemString(globals, "compile_template"), source, nullptr);
  Py_DECREF(source);
  if (compiled == nullptr) {
    throw std::runtime_error(impl->source +
                             ": the chat template does not compile: " + python_error());
  }
  impl->compiled = compiled;
  return ChatTemplate(std::move(impl));
}

std::string ChatTemplate::render(const std::string& messages_json,
                                 bool add_generation_prompt) const {
  PyObject* globals = renderer();
  Gil gil;
  PyObject* messages = py_str(messages_json, "messages");
  PyObject* specials = py_str(impl_->specials, "special tokens");
  PyObject* out = PyObject_CallFunctionObjArgs(
      PyDict_GetItemString(globals, "render"), impl_->compiled, messages,
      add_generation_prompt ? Py_True : Py_False, specials, nullptr);
  Py_DECREF(messages);
  Py_DECREF(specials);
  if (out == nullptr) throw std::runtime_error("chat template: " + python_error());
  Py_ssize_t size = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(out, &size);
  std::string text = utf8 != nullptr ? std::string(utf8, static_cast<size_t>(size)) : "";
  Py_DECREF(out);
  if (utf8 == nullptr) throw std::runtime_error("chat template: " + python_error());
  return text;
}

const std::string& ChatTemplate::source() const { return impl_->source; }

std::string user_turn(std::string_view message) {
  return json::array({{{"role", "user"}, {"content", std::string(message)}}}).dump();
}

std::vector<int64_t> apply_chat(const Tokenizer& tok, const ChatTemplate& chat,
                                const std::string& messages_json, bool add_generation_prompt) {
  return tok.encode(chat.render(messages_json, add_generation_prompt));
}

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

}  // namespace statickv::tokenizer
