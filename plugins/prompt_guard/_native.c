/* Compiled scorer for prompt_guard (an optional accelerator; the Python code gives the same
 * results without it).
 *
 * - `NgramTable(table, grams)`: an open-addressing hash table of the linear classifier's unigram
 *   and bigram weights; `logit(data, window, bias)` returns the classifier's logit exactly as
 *   `LinearModel.logit` computes it in Python (same token boundaries, same additions in the same
 *   order, so the same double).
 * - `RuleMatcher(table, words, prefixes, patterns)`: the rule pack's word patterns; `match(data)`
 *   runs the same bounded search as `rulepack._match_rest`.
 * - `scan(data, table, matcher, window, bias)`: both from one token pass.
 * - `LiteralFinder(literals)`: `find(data)` as the scanner's trie regex finds them.
 *
 * Text is tokenised with the 256-byte table of `normalize.tokenize`, in one pass over the bytes,
 * O(window) memory and no allocation per token; the GIL is released while scanning. Grams and
 * words are keyed by a 64-bit hash (FNV-1a over the token bytes, then a finaliser); a build that
 * finds two grams with the same key raises ValueError and the caller falls back to the Python
 * scorer. A token that is not in the model shares a key with one that is with probability
 * ~2^-64 per lookup (rule words are also compared byte for byte).
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

static PyObject *NgramTable_logit(NgramTable *self, PyObject *args); /* defined with the token pass */

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


/* ---- RuleMatcher: the rule pack's word patterns ----------------------------------------------
 *
 * `RuleMatcher(table, words, prefixes, patterns)`: `words` are the pack's words (a token's word
 * id is its index), `prefixes` its word prefixes (at most 32), and each pattern is
 * `(rule, slots)` with slots `(word_ids, prefix_mask, optional, gap)`; a pattern's first slot
 * holds plain words. `match(data)` tokenises `data` as above, lists the tokens some slot can
 * accept (a word, or a token starting with a prefix), and returns the sorted indexes of the
 * rules with a pattern that matches: the same search as `rulepack._match_rest` in Python, over
 * the same sparse list of tokens, so the same rules fire.
 */
#define MAX_WORD 255
#define MAX_PREFIXES 32
#define MAX_SLOTS 12

typedef struct {
    uint64_t key; /* uni_key of the word; 0: empty */
    int32_t id;
} WordSlot;

typedef struct {
    Py_ssize_t bits; /* offset of this slot's word bitset in `bitsets` */
    uint32_t prefixes;
    int optional;
    Py_ssize_t gap;
} PatternSlot;

typedef struct {
    Py_ssize_t rule;
    Py_ssize_t nslots;
    PatternSlot slots[MAX_SLOTS];
} Pattern;

typedef struct {
    PyObject_HEAD
    WordSlot *table;
    uint64_t mask;
    PyObject *words;    /* tuple of bytes (owned) */
    PyObject *prefixes; /* tuple of bytes (owned) */
    unsigned char first[256];
    Py_ssize_t nwords, words64, nrules;
    uint64_t *bitsets;   /* words64 uint64 per pattern slot */
    Pattern *patterns;
    Py_ssize_t npatterns;
    Py_ssize_t *starts;  /* per word id: [starts[id], starts[id+1]) into `by_first` */
    Py_ssize_t *by_first;
    unsigned char bytes[256];
} RuleMatcher;

static void RuleMatcher_dealloc(RuleMatcher *self) {
    PyMem_Free(self->table);
    PyMem_Free(self->bitsets);
    PyMem_Free(self->patterns);
    PyMem_Free(self->starts);
    PyMem_Free(self->by_first);
    Py_XDECREF(self->words);
    Py_XDECREF(self->prefixes);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int bytes_arg(PyObject *w, const char *what) {
    if (!PyBytes_Check(w) || PyBytes_GET_SIZE(w) == 0 || PyBytes_GET_SIZE(w) > MAX_WORD) {
        PyErr_Format(PyExc_ValueError, "%s must be non-empty bytes of at most 255 bytes", what);
        return -1;
    }
    return 0;
}

static int word_id(const RuleMatcher *t, uint64_t h, const unsigned char *token, Py_ssize_t len) {
    uint64_t key = uni_key(h);
    uint64_t j = key & t->mask;
    while (t->table[j].key != 0) {
        if (t->table[j].key == key) {
            PyObject *w = PyTuple_GET_ITEM(t->words, t->table[j].id);
            if (PyBytes_GET_SIZE(w) == len && memcmp(PyBytes_AS_STRING(w), token, len) == 0) return t->table[j].id;
            return -1;
        }
        j = (j + 1) & t->mask;
    }
    return -1;
}

static uint32_t prefix_mask(const RuleMatcher *t, const unsigned char *token, Py_ssize_t len) {
    uint32_t m = 0;
    if (!t->first[token[0]]) return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t->prefixes); i++) {
        PyObject *p = PyTuple_GET_ITEM(t->prefixes, i);
        Py_ssize_t n = PyBytes_GET_SIZE(p);
        if (n <= len && memcmp(PyBytes_AS_STRING(p), token, n) == 0) m |= (uint32_t)1 << i;
    }
    return m;
}

static int parse_slot(RuleMatcher *self, PyObject *item, PatternSlot *slot, Py_ssize_t index) {
    PyObject *ids;
    unsigned long prefixes;
    int optional;
    Py_ssize_t gap;
    if (!PyArg_ParseTuple(item, "Okpn", &ids, &prefixes, &optional, &gap)) return -1;
    slot->bits = index * self->words64;
    slot->prefixes = (uint32_t)prefixes;
    slot->optional = optional;
    slot->gap = gap < 0 ? 0 : gap;
    PyObject *seq = PySequence_Fast(ids, "word ids must be a sequence");
    if (seq == NULL) return -1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        Py_ssize_t id = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i));
        if (id < 0 || id >= self->nwords) {
            Py_DECREF(seq);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "word id out of range");
            return -1;
        }
        self->bitsets[slot->bits + id / 64] |= (uint64_t)1 << (id % 64);
    }
    Py_DECREF(seq);
    return 0;
}

static int RuleMatcher_init(RuleMatcher *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"table", "words", "prefixes", "patterns", NULL};
    Py_buffer table;
    PyObject *words, *prefixes, *patterns;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*OOO", kwlist, &table, &words, &prefixes, &patterns)) return -1;
    if (table.len != 256) {
        PyBuffer_Release(&table);
        PyErr_SetString(PyExc_ValueError, "table must be 256 bytes");
        return -1;
    }
    memcpy(self->bytes, table.buf, 256);
    PyBuffer_Release(&table);
    if (self->words != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "RuleMatcher is already initialised");
        return -1;
    }
    self->words = PySequence_Tuple(words);
    self->prefixes = self->words ? PySequence_Tuple(prefixes) : NULL;
    PyObject *pats = self->prefixes ? PySequence_Tuple(patterns) : NULL;
    if (pats == NULL) return -1;
    int rc = -1;
    self->nwords = PyTuple_GET_SIZE(self->words);
    self->words64 = (self->nwords + 63) / 64;
    if (PyTuple_GET_SIZE(self->prefixes) > MAX_PREFIXES) {
        PyErr_SetString(PyExc_ValueError, "at most 32 prefixes");
        goto done;
    }
    uint64_t cap = 16;
    while (cap < (uint64_t)self->nwords * 2 + 1) cap <<= 1;
    self->table = PyMem_Calloc(cap, sizeof(WordSlot));
    self->mask = cap - 1;
    self->npatterns = PyTuple_GET_SIZE(pats);
    self->patterns = PyMem_Calloc(self->npatterns ? self->npatterns : 1, sizeof(Pattern));
    self->bitsets = PyMem_Calloc((size_t)(self->npatterns * MAX_SLOTS * self->words64) + 1, sizeof(uint64_t));
    self->starts = PyMem_Calloc(self->nwords + 1, sizeof(Py_ssize_t));
    if (!self->table || !self->patterns || !self->bitsets || !self->starts) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < self->nwords; i++) {
        PyObject *w = PyTuple_GET_ITEM(self->words, i);
        if (bytes_arg(w, "words") < 0) goto done;
        uint64_t key = uni_key(fnv((const unsigned char *)PyBytes_AS_STRING(w), PyBytes_GET_SIZE(w)));
        uint64_t j = key & self->mask;
        while (self->table[j].key != 0) {
            if (self->table[j].key == key) {
                PyErr_SetString(PyExc_ValueError, "two words share a hash key (or a word is listed twice)");
                goto done;
            }
            j = (j + 1) & self->mask;
        }
        self->table[j].key = key;
        self->table[j].id = (int32_t)i;
    }
    memset(self->first, 0, sizeof(self->first));
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->prefixes); i++) {
        PyObject *w = PyTuple_GET_ITEM(self->prefixes, i);
        if (bytes_arg(w, "prefixes") < 0) goto done;
        self->first[(unsigned char)PyBytes_AS_STRING(w)[0]] = 1;
    }
    self->nrules = 0;
    Py_ssize_t total_first = 0;
    for (Py_ssize_t p = 0; p < self->npatterns; p++) {
        PyObject *slots;
        Pattern *pat = &self->patterns[p];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(pats, p), "nO", &pat->rule, &slots)) goto done;
        PyObject *seq = PySequence_Fast(slots, "slots must be a sequence");
        if (seq == NULL) goto done;
        pat->nslots = PySequence_Fast_GET_SIZE(seq);
        if (pat->nslots < 1 || pat->nslots > MAX_SLOTS || pat->rule < 0) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "a pattern has 1 to 12 slots and a rule index >= 0");
            goto done;
        }
        for (Py_ssize_t k = 0; k < pat->nslots; k++) {
            if (parse_slot(self, PySequence_Fast_GET_ITEM(seq, k), &pat->slots[k], p * MAX_SLOTS + k) < 0) {
                Py_DECREF(seq);
                goto done;
            }
        }
        Py_DECREF(seq);
        if (pat->rule + 1 > self->nrules) self->nrules = pat->rule + 1;
        const uint64_t *bits = &self->bitsets[pat->slots[0].bits];
        for (Py_ssize_t id = 0; id < self->nwords; id++)
            if (bits[id / 64] >> (id % 64) & 1) {
                self->starts[id + 1]++;
                total_first++;
            }
    }
    for (Py_ssize_t id = 0; id < self->nwords; id++) self->starts[id + 1] += self->starts[id];
    self->by_first = PyMem_Calloc(total_first + 1, sizeof(Py_ssize_t));
    Py_ssize_t *fill = PyMem_Calloc(self->nwords + 1, sizeof(Py_ssize_t));
    if (!self->by_first || !fill) {
        PyMem_Free(fill);
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t p = 0; p < self->npatterns; p++) {
        const uint64_t *bits = &self->bitsets[self->patterns[p].slots[0].bits];
        for (Py_ssize_t id = 0; id < self->nwords; id++)
            if (bits[id / 64] >> (id % 64) & 1) self->by_first[self->starts[id] + fill[id]++] = p;
    }
    PyMem_Free(fill);
    rc = 0;
done:
    Py_DECREF(pats);
    return rc;
}

typedef struct {
    Py_ssize_t *pos;
    int32_t *wid;
    uint32_t *pmask;
    Py_ssize_t n;
} Hits;

static int accepts(const RuleMatcher *t, const PatternSlot *slot, const Hits *h, Py_ssize_t i) {
    int32_t id = h->wid[i];
    if (id >= 0 && (t->bitsets[slot->bits + id / 64] >> (id % 64) & 1)) return 1;
    return (h->pmask[i] & slot->prefixes) != 0;
}

static int match_rest(const RuleMatcher *t, const Pattern *pat, Py_ssize_t k, const Hits *h, Py_ssize_t j,
                      Py_ssize_t pos) {
    if (k == pat->nslots) return 1;
    const PatternSlot *slot = &pat->slots[k];
    Py_ssize_t end = pos + slot->gap + 1;
    for (Py_ssize_t i = j; i < h->n && h->pos[i] < end; i++)
        if (accepts(t, slot, h, i) && match_rest(t, pat, k + 1, h, i + 1, h->pos[i] + 1)) return 1;
    return slot->optional && match_rest(t, pat, k + 1, h, j, pos);
}

/* ---- The token pass: one walk over the bytes for the classifier, the rules, or both ---------- */

typedef struct {
    const NgramTable *table; /* classifier state, when `table` */
    Py_ssize_t window, ring_size, count;
    double *ring, sum, best;
    int have_prev;
    uint64_t prev;
    const RuleMatcher *rules; /* rule state, when `rules` */
    Hits hits;
} Pass;

static void pass_free(Pass *ps) {
    PyMem_Free(ps->ring);
    PyMem_Free(ps->hits.pos);
    PyMem_Free(ps->hits.wid);
    PyMem_Free(ps->hits.pmask);
}

static int pass_init(Pass *ps, const NgramTable *table, Py_ssize_t window, const RuleMatcher *rules, Py_ssize_t len) {
    memset(ps, 0, sizeof(*ps));
    ps->table = table;
    ps->rules = rules;
    ps->best = -INFINITY;
    if (table != NULL) {
        if (window < 1) {
            PyErr_SetString(PyExc_ValueError, "window must be positive");
            return -1;
        }
        ps->window = window;
        ps->ring_size = window + 1;
        ps->ring = PyMem_Malloc((size_t)ps->ring_size * sizeof(double));
        if (ps->ring == NULL) goto nomem;
        ps->ring[0] = 0.0;
    }
    if (rules != NULL) {
        Py_ssize_t cap = len / 2 + 1; /* a token and its separator take two bytes at least */
        ps->hits.pos = PyMem_Malloc(cap * sizeof(Py_ssize_t));
        ps->hits.wid = PyMem_Malloc(cap * sizeof(int32_t));
        ps->hits.pmask = PyMem_Malloc(cap * sizeof(uint32_t));
        if (!ps->hits.pos || !ps->hits.wid || !ps->hits.pmask) goto nomem;
    }
    return 0;
nomem:
    pass_free(ps);
    PyErr_NoMemory();
    return -1;
}

/* The classifier's part: token `h` completes the bigram of the previous token, whose
 * contribution (its unigram plus that bigram) is added to the window sums, in the order the
 * Python scorer adds them. */
static void pass_push(Pass *ps, double c) {
    ps->sum = ps->sum + c;
    ps->count++;
    ps->ring[ps->count % ps->ring_size] = ps->sum;
    if (ps->count >= ps->window) {
        double d = ps->sum - ps->ring[(ps->count - ps->window) % ps->ring_size];
        if (d > ps->best) ps->best = d;
    }
}

static void pass_token(Pass *ps, uint64_t h, const unsigned char *token, Py_ssize_t len, int truncated,
                       Py_ssize_t index) {
    if (ps->table != NULL) {
        if (ps->have_prev) {
            double u = lookup(ps->table, uni_key(ps->prev));
            double b = lookup(ps->table, bi_key(ps->prev, h));
            pass_push(ps, u + b);
        }
        ps->prev = h;
        ps->have_prev = 1;
    }
    if (ps->rules != NULL) {
        /* A token longer than the buffer is no word, but may still start with a prefix. */
        int32_t id = truncated ? -1 : word_id(ps->rules, h, token, len);
        uint32_t m = prefix_mask(ps->rules, token, len);
        if (id >= 0 || m) {
            Hits *hs = &ps->hits;
            hs->pos[hs->n] = index;
            hs->wid[hs->n] = id;
            hs->pmask[hs->n] = m;
            hs->n++;
        }
    }
}

/* Tokenise as `normalize.tokenize` does (the 256-byte table; 0x20 separates) and feed each
 * token to the pass. Runs without the GIL: it reads only memory its owners keep alive. */
static void pass_run(Pass *ps, const unsigned char *bytes, const unsigned char *p, Py_ssize_t n) {
    unsigned char token[MAX_WORD];
    Py_ssize_t len = 0, index = 0;
    int in_token = 0, truncated = 0;
    uint64_t h = 0;
    for (Py_ssize_t i = 0; i <= n; i++) {
        unsigned char c = i < n ? bytes[p[i]] : SEPARATOR;
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
            pass_token(ps, h, token, len, truncated, index++);
        }
    }
    if (ps->table != NULL && ps->have_prev) pass_push(ps, lookup(ps->table, uni_key(ps->prev)) + 0.0);
}

static double pass_logit(const Pass *ps, double bias) {
    if (ps->count == 0) return bias;
    if (ps->count <= ps->window) return bias + ps->sum;
    return bias + ps->best;
}

/* Run the patterns over the hits; `fired` has one byte per rule. */
static void pass_match(const Pass *ps, unsigned char *fired) {
    const RuleMatcher *t = ps->rules;
    const Hits *h = &ps->hits;
    for (Py_ssize_t j = 0; j < h->n; j++) {
        int32_t id = h->wid[j];
        if (id < 0) continue;
        for (Py_ssize_t s = t->starts[id]; s < t->starts[id + 1]; s++) {
            const Pattern *pat = &t->patterns[t->by_first[s]];
            if (!fired[pat->rule] && match_rest(t, pat, 1, h, j + 1, h->pos[j] + 1)) fired[pat->rule] = 1;
        }
    }
}

/* The indexes i < n with flags[i] set, as a list of ints. */
static PyObject *flagged_indexes(const unsigned char *flags, Py_ssize_t n) {
    PyObject *out = PyList_New(0);
    for (Py_ssize_t r = 0; out && r < n; r++) {
        if (!flags[r]) continue;
        PyObject *v = PyLong_FromSsize_t(r);
        if (v == NULL || PyList_Append(out, v) < 0) Py_CLEAR(out);
        Py_XDECREF(v);
    }
    return out;
}

/* Both passes' work for one text: (sorted rule indexes, logit). Either part may be absent. */
static PyObject *run(const NgramTable *table, Py_ssize_t window, double bias, const RuleMatcher *rules,
                     PyObject *data) {
    Py_buffer buf;
    if (PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE) < 0) return NULL;
    Pass ps;
    PyObject *result = NULL;
    unsigned char *fired = NULL;
    if (pass_init(&ps, table, window, rules, buf.len) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    if (rules != NULL && (fired = PyMem_Calloc(rules->nrules + 1, 1)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const unsigned char *bytes = table != NULL ? table->bytes : rules->bytes;
    Py_BEGIN_ALLOW_THREADS
    pass_run(&ps, bytes, buf.buf, buf.len);
    if (rules != NULL) pass_match(&ps, fired);
    Py_END_ALLOW_THREADS
    PyObject *indexes = rules != NULL ? flagged_indexes(fired, rules->nrules) : PyList_New(0);
    if (indexes != NULL) result = Py_BuildValue("(Nd)", indexes, pass_logit(&ps, bias));
done:
    PyMem_Free(fired);
    pass_free(&ps);
    PyBuffer_Release(&buf);
    return result;
}

/* NgramTable.logit(data, window, bias) -> bias + the best window sum over the tokens of data */
static PyObject *NgramTable_logit(NgramTable *self, PyObject *args) {
    PyObject *data;
    Py_ssize_t window;
    double bias;
    if (!PyArg_ParseTuple(args, "Ond", &data, &window, &bias)) return NULL;
    PyObject *both = run(self, window, bias, NULL, data);
    if (both == NULL) return NULL;
    PyObject *logit = PyTuple_GET_ITEM(both, 1);
    Py_INCREF(logit);
    Py_DECREF(both);
    return logit;
}

/* RuleMatcher.match(data) -> sorted indexes of the rules whose patterns match */
static PyObject *RuleMatcher_match(RuleMatcher *self, PyObject *args) {
    PyObject *data;
    if (!PyArg_ParseTuple(args, "O", &data)) return NULL;
    PyObject *both = run(NULL, 0, 0.0, self, data);
    if (both == NULL) return NULL;
    PyObject *indexes = PyTuple_GET_ITEM(both, 0);
    Py_INCREF(indexes);
    Py_DECREF(both);
    return indexes;
}

static PyMethodDef RuleMatcher_methods[] = {
    {"match", (PyCFunction)RuleMatcher_match, METH_VARARGS,
     "match(data) -> sorted indexes of the rules whose patterns match the tokens of data"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RuleMatcherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "plugins.prompt_guard._native.RuleMatcher",
    .tp_basicsize = sizeof(RuleMatcher),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The rule pack's word patterns, matched over a text in one pass.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)RuleMatcher_init,
    .tp_dealloc = (destructor)RuleMatcher_dealloc,
    .tp_methods = RuleMatcher_methods,
};

/* ---- LiteralFinder: the literals of the rule pack and the heuristics --------------------------
 *
 * `LiteralFinder(literals)`; `find(data) -> sorted indexes of the literals found`, scanning as
 * the scanner's trie regex does with `findall`: from left to right, at each position the longest
 * literal that starts there, then on after it (non-overlapping). One pass over the bytes; at a
 * byte that starts no literal, one table look-up.
 */
typedef struct {
    PyObject_HEAD
    PyObject *literals;             /* tuple of bytes (owned) */
    Py_ssize_t *order;              /* literal indexes grouped by first byte, longest first */
    Py_ssize_t starts[257];         /* per first byte: [starts[b], starts[b + 1]) into `order` */
} LiteralFinder;

static void LiteralFinder_dealloc(LiteralFinder *self) {
    PyMem_Free(self->order);
    Py_XDECREF(self->literals);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int LiteralFinder_init(LiteralFinder *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"literals", NULL};
    PyObject *literals;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O", kwlist, &literals)) return -1;
    if (self->literals != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "LiteralFinder is already initialised");
        return -1;
    }
    self->literals = PySequence_Tuple(literals);
    if (self->literals == NULL) return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(self->literals);
    memset(self->starts, 0, sizeof(self->starts));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *lit = PyTuple_GET_ITEM(self->literals, i);
        if (!PyBytes_Check(lit) || PyBytes_GET_SIZE(lit) == 0) {
            PyErr_SetString(PyExc_ValueError, "literals must be non-empty bytes");
            return -1;
        }
        self->starts[(unsigned char)PyBytes_AS_STRING(lit)[0] + 1]++;
    }
    for (int b = 0; b < 256; b++) self->starts[b + 1] += self->starts[b];
    self->order = PyMem_Calloc(n + 1, sizeof(Py_ssize_t));
    if (self->order == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t fill[256] = {0};
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)PyBytes_AS_STRING(PyTuple_GET_ITEM(self->literals, i))[0];
        /* insertion by length, longest first, so the first literal that matches is the longest */
        Py_ssize_t at = self->starts[b] + fill[b]++;
        Py_ssize_t len = PyBytes_GET_SIZE(PyTuple_GET_ITEM(self->literals, i));
        while (at > self->starts[b] &&
               PyBytes_GET_SIZE(PyTuple_GET_ITEM(self->literals, self->order[at - 1])) < len) {
            self->order[at] = self->order[at - 1];
            at--;
        }
        self->order[at] = i;
    }
    return 0;
}

static PyObject *LiteralFinder_find(LiteralFinder *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(self->literals);
    unsigned char *found = PyMem_Calloc(n + 1, 1);
    if (found == NULL) {
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    const unsigned char *p = buf.buf;
    Py_ssize_t len = buf.len, i = 0;
    while (i < len) {
        Py_ssize_t lo = self->starts[p[i]], hi = self->starts[p[i] + 1], step = 1;
        for (Py_ssize_t k = lo; k < hi; k++) {
            PyObject *lit = PyTuple_GET_ITEM(self->literals, self->order[k]);
            Py_ssize_t m = PyBytes_GET_SIZE(lit);
            if (m <= len - i && memcmp(PyBytes_AS_STRING(lit), p + i, m) == 0) {
                found[self->order[k]] = 1;
                step = m;
                break;
            }
        }
        i += step;
    }
    PyBuffer_Release(&buf);
    PyObject *out = flagged_indexes(found, n);
    PyMem_Free(found);
    return out;
}

static PyMethodDef LiteralFinder_methods[] = {
    {"find", (PyCFunction)LiteralFinder_find, METH_VARARGS,
     "find(data) -> sorted indexes of the literals found (leftmost-longest, non-overlapping)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LiteralFinderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "plugins.prompt_guard._native.LiteralFinder",
    .tp_basicsize = sizeof(LiteralFinder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Plain literals found as the scanner's trie regex finds them, in one pass.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)LiteralFinder_init,
    .tp_dealloc = (destructor)LiteralFinder_dealloc,
    .tp_methods = LiteralFinder_methods,
};

/* scan(data, table, matcher, window, bias) -> (sorted rule indexes, classifier logit), from one
 * token pass: what `matcher.match(data)` and `table.logit(data, window, bias)` give. */
static PyObject *native_scan(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *data, *table, *matcher;
    Py_ssize_t window;
    double bias;
    if (!PyArg_ParseTuple(args, "OO!O!nd", &data, &NgramTableType, &table, &RuleMatcherType, &matcher, &window, &bias))
        return NULL;
    if (memcmp(((NgramTable *)table)->bytes, ((RuleMatcher *)matcher)->bytes, 256) != 0) {
        PyErr_SetString(PyExc_ValueError, "the table and the matcher tokenise differently");
        return NULL;
    }
    return run((NgramTable *)table, window, bias, (RuleMatcher *)matcher, data);
}

static PyMethodDef native_functions[] = {
    {"scan", native_scan, METH_VARARGS,
     "scan(data, table, matcher, window, bias) -> (rule indexes, logit) from one pass over data"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_native",
    .m_doc = "Compiled scorer for prompt_guard: the classifier's n-gram table, the rule matcher, the literal finder.",
    .m_size = -1,
    .m_methods = native_functions,
};

PyMODINIT_FUNC PyInit__native(void) {
    struct {
        const char *name;
        PyTypeObject *type;
    } types[] = {{"NgramTable", &NgramTableType}, {"RuleMatcher", &RuleMatcherType}, {"LiteralFinder", &LiteralFinderType}};
    PyObject *m = PyModule_Create(&native_module);
    if (m == NULL) return NULL;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        if (PyType_Ready(types[i].type) < 0 || PyModule_AddObjectRef(m, types[i].name, (PyObject *)types[i].type) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
