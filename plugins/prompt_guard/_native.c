/* Compiled scorer for prompt_guard's linear n-gram classifier (optional accelerator).
 *
 * `NgramTable(table, grams)` builds an open-addressing hash table of the model's unigram and
 * bigram weights; `NgramTable.logit(data, window, bias)` tokenises UTF-8 text with the same
 * 256-byte table as `normalize.tokenize` and returns the classifier's logit, exactly as
 * `LinearModel.logit` computes it in Python (same token boundaries, same additions in the
 * same order, so the same double). One pass over the bytes, O(window) memory, no allocation
 * per token, and the GIL is released while scanning.
 *
 * Grams are keyed by a 64-bit hash (FNV-1a over the token bytes, then a finaliser); a build
 * that finds two grams with the same key raises ValueError, and the caller falls back to the
 * Python scorer. A token that is not in the model can share a key with one that is only with
 * probability ~2^-64 per lookup.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL
#define SEPARATOR 0x20

static uint64_t fmix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k ? k : 1; /* 0 marks an empty slot */
}

static uint64_t uni_key(uint64_t h) { return fmix64(h); }

static uint64_t bi_key(uint64_t h1, uint64_t h2) {
    return fmix64(h1 * 0x9e3779b97f4a7c15ULL + h2 + 0x632be59bd9b4e019ULL);
}

static uint64_t fnv(const unsigned char *p, Py_ssize_t n) {
    uint64_t h = FNV_OFFSET;
    for (Py_ssize_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    return h;
}

typedef struct {
    uint64_t key; /* 0: empty */
    double value;
} Slot;

typedef struct {
    PyObject_HEAD
    Slot *slots; /* key and value side by side: one cache line per probe */
    uint64_t mask;
    Py_ssize_t size;
    unsigned char bytes[256];
} NgramTable;

static double lookup(const NgramTable *t, uint64_t key) {
    uint64_t i = key & t->mask;
    for (;;) {
        const Slot *slot = &t->slots[i];
        if (slot->key == key) return slot->value;
        if (slot->key == 0) return 0.0;
        i = (i + 1) & t->mask;
    }
}

static int insert(NgramTable *t, uint64_t key, double value) {
    uint64_t i = key & t->mask;
    while (t->slots[i].key != 0) {
        if (t->slots[i].key == key) return -1;
        i = (i + 1) & t->mask;
    }
    t->slots[i].key = key;
    t->slots[i].value = value;
    t->size++;
    return 0;
}

static void NgramTable_dealloc(NgramTable *self) {
    PyMem_Free(self->slots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* NgramTable(table: bytes[256], grams: list[tuple[bytes, bytes | None, float]]) */
static int NgramTable_init(NgramTable *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"table", "grams", NULL};
    Py_buffer table;
    PyObject *grams;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*O", kwlist, &table, &grams)) return -1;
    if (table.len != 256) {
        PyBuffer_Release(&table);
        PyErr_SetString(PyExc_ValueError, "table must be 256 bytes");
        return -1;
    }
    memcpy(self->bytes, table.buf, 256);
    PyBuffer_Release(&table);
    PyObject *seq = PySequence_Fast(grams, "grams must be a sequence");
    if (seq == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2 + 1) cap <<= 1;
    PyMem_Free(self->slots);
    self->slots = PyMem_Calloc(cap, sizeof(Slot));
    self->mask = cap - 1;
    self->size = 0;
    if (self->slots == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        const char *first, *second = NULL;
        Py_ssize_t first_len, second_len = 0;
        double weight;
        if (!PyArg_ParseTuple(item, "y#z#d", &first, &first_len, &second, &second_len, &weight)) {
            Py_DECREF(seq);
            return -1;
        }
        uint64_t h1 = fnv((const unsigned char *)first, first_len);
        uint64_t key = second ? bi_key(h1, fnv((const unsigned char *)second, second_len)) : uni_key(h1);
        if (insert(self, key, weight) < 0) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "two n-grams share a hash key");
            return -1;
        }
    }
    Py_DECREF(seq);
    return 0;
}

/* logit(data: bytes-like, window: int, bias: float) -> float */
static PyObject *NgramTable_logit(NgramTable *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t window;
    double bias;
    if (!PyArg_ParseTuple(args, "y*nd", &buf, &window, &bias)) return NULL;
    if (window < 1) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "window must be positive");
        return NULL;
    }
    double *ring = PyMem_Malloc((size_t)(window + 1) * sizeof(double));
    if (ring == NULL) {
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    const unsigned char *p = buf.buf;
    Py_ssize_t n = buf.len;
    Py_ssize_t ring_size = window + 1;
    Py_ssize_t count = 0; /* contributions pushed so far */
    double sum = 0.0, best = -INFINITY;
    int in_token = 0, have_prev = 0;
    uint64_t h = 0, prev = 0;

    Py_BEGIN_ALLOW_THREADS
    ring[0] = 0.0;
#define PUSH(c)                                                            \
    do {                                                                   \
        sum = sum + (c);                                                   \
        count++;                                                           \
        ring[count % ring_size] = sum;                                     \
        if (count >= window) {                                             \
            double d = sum - ring[(count - window) % ring_size];           \
            if (d > best) best = d;                                        \
        }                                                                  \
    } while (0)
    for (Py_ssize_t i = 0; i <= n; i++) {
        unsigned char c = i < n ? self->bytes[p[i]] : SEPARATOR;
        if (c != SEPARATOR) {
            if (!in_token) {
                h = FNV_OFFSET;
                in_token = 1;
            }
            h ^= c;
            h *= FNV_PRIME;
        } else if (in_token) {
            in_token = 0;
            if (have_prev) {
                double u = lookup(self, uni_key(prev));
                double b = lookup(self, bi_key(prev, h));
                PUSH(u + b);
            }
            prev = h;
            have_prev = 1;
        }
    }
    if (have_prev) {
        double u = lookup(self, uni_key(prev));
        PUSH(u + 0.0);
    }
#undef PUSH
    Py_END_ALLOW_THREADS

    PyMem_Free(ring);
    PyBuffer_Release(&buf);
    if (count == 0) return PyFloat_FromDouble(bias);
    if (count <= window) return PyFloat_FromDouble(bias + sum);
    return PyFloat_FromDouble(bias + best);
}

static PyObject *NgramTable_len(NgramTable *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromSsize_t(self->size);
}

static PyMethodDef NgramTable_methods[] = {
    {"logit", (PyCFunction)NgramTable_logit, METH_VARARGS,
     "logit(data, window, bias) -> bias + the best window sum over the tokens of data"},
    {"size", (PyCFunction)NgramTable_len, METH_NOARGS, "number of n-grams in the table"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject NgramTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "plugins.prompt_guard._native.NgramTable",
    .tp_basicsize = sizeof(NgramTable),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Hash table of n-gram weights with a one-pass windowed scorer.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)NgramTable_init,
    .tp_dealloc = (destructor)NgramTable_dealloc,
    .tp_methods = NgramTable_methods,
};


/* ---- WordTable: which tokens of a text are rule words -------------------------------------
 *
 * `WordTable(table, words, prefixes)`; `find(data) -> (token_count, positions, tokens)` lists,
 * in order, every token of `data` (tokenised as above) that is one of `words` or starts with
 * one of `prefixes`, with its index among all tokens. The rule matcher only ever looks at
 * such tokens, so it never has to build the full token list of a long benign text.
 */
#define MAX_WORD 255

typedef struct {
    PyObject_HEAD
    uint64_t *keys;
    PyObject **words; /* borrowed from `self->all` */
    uint64_t mask;
    PyObject *all;      /* tuple of the word bytes objects (owned) */
    PyObject *prefixes; /* tuple of prefix bytes objects (owned) */
    unsigned char first[256]; /* first bytes of the prefixes */
    Py_ssize_t longest;
    unsigned char bytes[256];
} WordTable;

static void WordTable_dealloc(WordTable *self) {
    PyMem_Free(self->keys);
    PyMem_Free(self->words);
    Py_XDECREF(self->all);
    Py_XDECREF(self->prefixes);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int WordTable_init(WordTable *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"table", "words", "prefixes", NULL};
    Py_buffer table;
    PyObject *words, *prefixes;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*OO", kwlist, &table, &words, &prefixes)) return -1;
    if (table.len != 256) {
        PyBuffer_Release(&table);
        PyErr_SetString(PyExc_ValueError, "table must be 256 bytes");
        return -1;
    }
    memcpy(self->bytes, table.buf, 256);
    PyBuffer_Release(&table);
    PyObject *all = PySequence_Tuple(words);
    PyObject *pre = all ? PySequence_Tuple(prefixes) : NULL;
    if (pre == NULL) {
        Py_XDECREF(all);
        return -1;
    }
    Py_XSETREF(self->all, all);
    Py_XSETREF(self->prefixes, pre);
    Py_ssize_t n = PyTuple_GET_SIZE(all);
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2 + 1) cap <<= 1;
    PyMem_Free(self->keys);
    PyMem_Free(self->words);
    self->keys = PyMem_Calloc(cap, sizeof(uint64_t));
    self->words = PyMem_Calloc(cap, sizeof(PyObject *));
    self->mask = cap - 1;
    if (self->keys == NULL || self->words == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->longest = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *w = PyTuple_GET_ITEM(all, i);
        if (!PyBytes_Check(w) || PyBytes_GET_SIZE(w) == 0 || PyBytes_GET_SIZE(w) > MAX_WORD) {
            PyErr_SetString(PyExc_ValueError, "words must be non-empty bytes of at most 255 bytes");
            return -1;
        }
        uint64_t key = uni_key(fnv((const unsigned char *)PyBytes_AS_STRING(w), PyBytes_GET_SIZE(w)));
        uint64_t j = key & self->mask;
        while (self->keys[j] != 0 && self->keys[j] != key) j = (j + 1) & self->mask;
        if (self->keys[j] == key && self->words[j] != NULL &&
            PyObject_RichCompareBool(self->words[j], w, Py_EQ) != 1) {
            PyErr_SetString(PyExc_ValueError, "two words share a hash key");
            return -1;
        }
        self->keys[j] = key;
        self->words[j] = w;
        if (PyBytes_GET_SIZE(w) > self->longest) self->longest = PyBytes_GET_SIZE(w);
    }
    memset(self->first, 0, sizeof(self->first));
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pre); i++) {
        PyObject *w = PyTuple_GET_ITEM(pre, i);
        if (!PyBytes_Check(w) || PyBytes_GET_SIZE(w) == 0 || PyBytes_GET_SIZE(w) > MAX_WORD) {
            PyErr_SetString(PyExc_ValueError, "prefixes must be non-empty bytes of at most 255 bytes");
            return -1;
        }
        self->first[(unsigned char)PyBytes_AS_STRING(w)[0]] = 1;
    }
    return 0;
}

/* The word object equal to token[0:len] (hash `h`), or NULL. */
static PyObject *word_of(const WordTable *t, uint64_t h, const unsigned char *token, Py_ssize_t len) {
    uint64_t key = uni_key(h);
    uint64_t j = key & t->mask;
    while (t->keys[j] != 0) {
        if (t->keys[j] == key) {
            PyObject *w = t->words[j];
            if (PyBytes_GET_SIZE(w) == len && memcmp(PyBytes_AS_STRING(w), token, len) == 0) return w;
            return NULL;
        }
        j = (j + 1) & t->mask;
    }
    return NULL;
}

static int has_prefix(const WordTable *t, const unsigned char *token, Py_ssize_t len) {
    if (!t->first[token[0]]) return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t->prefixes); i++) {
        PyObject *p = PyTuple_GET_ITEM(t->prefixes, i);
        Py_ssize_t n = PyBytes_GET_SIZE(p);
        if (n <= len && memcmp(PyBytes_AS_STRING(p), token, n) == 0) return 1;
    }
    return 0;
}

static int emit_word(const WordTable *t, PyObject *positions, PyObject *tokens, Py_ssize_t index,
                     uint64_t h, const unsigned char *token, Py_ssize_t len, int truncated) {
    PyObject *word = truncated ? NULL : word_of(t, h, token, len);
    PyObject *item;
    if (word != NULL) {
        Py_INCREF(word);
        item = word;
    } else if (!truncated && has_prefix(t, token, len)) {
        item = PyBytes_FromStringAndSize((const char *)token, len);
        if (item == NULL) return -1;
    } else {
        return 0;
    }
    PyObject *pos = PyLong_FromSsize_t(index);
    if (pos == NULL || PyList_Append(positions, pos) < 0 || PyList_Append(tokens, item) < 0) {
        Py_XDECREF(pos);
        Py_DECREF(item);
        return -1;
    }
    Py_DECREF(pos);
    Py_DECREF(item);
    return 0;
}

static PyObject *WordTable_find(WordTable *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    PyObject *positions = PyList_New(0), *tokens = PyList_New(0);
    if (positions == NULL || tokens == NULL) goto fail;
    const unsigned char *p = buf.buf;
    Py_ssize_t n = buf.len, count = 0, len = 0;
    unsigned char token[MAX_WORD];
    int in_token = 0, truncated = 0;
    uint64_t h = 0;
    for (Py_ssize_t i = 0; i <= n; i++) {
        unsigned char c = i < n ? self->bytes[p[i]] : SEPARATOR;
        if (c != SEPARATOR) {
            if (!in_token) {
                h = FNV_OFFSET;
                in_token = 1;
                truncated = 0;
                len = 0;
            }
            h ^= c;
            h *= FNV_PRIME;
            if (len < MAX_WORD) token[len++] = c;
            else truncated = 1;
        } else if (in_token) {
            in_token = 0;
            if (emit_word(self, positions, tokens, count, h, token, len, truncated) < 0) goto fail;
            count++;
        }
    }
    PyBuffer_Release(&buf);
    return Py_BuildValue("(nNN)", count, positions, tokens);
fail:
    PyBuffer_Release(&buf);
    Py_XDECREF(positions);
    Py_XDECREF(tokens);
    return NULL;
}

static PyMethodDef WordTable_methods[] = {
    {"find", (PyCFunction)WordTable_find, METH_VARARGS,
     "find(data) -> (token_count, positions, tokens) of the tokens that are words or start with a prefix"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WordTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "plugins.prompt_guard._native.WordTable",
    .tp_basicsize = sizeof(WordTable),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The rule words and prefixes; find() lists where they occur in a text.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)WordTable_init,
    .tp_dealloc = (destructor)WordTable_dealloc,
    .tp_methods = WordTable_methods,
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "_native", "Compiled scorer for prompt_guard's classifier.", -1, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&NgramTableType) < 0 || PyType_Ready(&WordTableType) < 0) return NULL;
    PyObject *m = PyModule_Create(&native_module);
    if (m == NULL) return NULL;
    Py_INCREF(&NgramTableType);
    if (PyModule_AddObject(m, "NgramTable", (PyObject *)&NgramTableType) < 0) {
        Py_DECREF(&NgramTableType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&WordTableType);
    if (PyModule_AddObject(m, "WordTable", (PyObject *)&WordTableType) < 0) {
        Py_DECREF(&WordTableType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
