#!/usr/bin/env python3
"""Checks the core's layering (docs/design.md, "Layers" and "Stages").

nexus/src is a folder per layer, lowest first in LAYERS. The check fails on
 - a call or data reference (read with nm from the object files) from a
   file to a file of a higher layer, or a circle of them between files;
 - an include of a higher layer's header, or a circle of includes;
 - the installation of a hook: a call, from another file, of a function
   declared in a core header that takes a function pointer (or a table of
   them) and keeps it for later. It counts as a reference from the
   function's file up to the installer's. The one way for a higher layer
   to be called from a lower one is a stage table: a struct nxi_*_stages
   declared by the lower layer, registered by nxi_*_stages_set, and named
   in docs/design.md's "Stages";
 - any other struct of function pointers in a core header, or a global
   function-pointer variable, unless CALLBACK_DATA says why it is not a
   hook;
 - a file under nexus/ that includes a protocol's header.

With --protocols, checks each protocol module's folder: no circle of calls
between its object files, no circle of includes between its files
(docs/modules.md, "Inside a module").

Usage: check_layers.py SOURCE_ROOT OBJECT_DIR...
       check_layers.py --protocols BUILD_ROOT SOURCE_ROOT NAME..."""
import collections
import glob
import os
import re
import subprocess
import sys

# nexus/src's folders, lowest first: a file may use its own folder's files
# and those of the folders before it.
LAYERS = ['threads', 'base', 'buffers', 'modules', 'contexts', 'engine',
          'rsr', 'progress', 'services', 'processes', 'runtime']

# Functions that take a function pointer and are not hooks, and why.
NOT_HOOKS = {
    'nxi_rthread_spawn': 'starts a runtime thread running fn now: a call',
    'nxi_fiber_dispatch': 'runs a threaded handler now, and `drain` after '
                          'it on the same stack before returning (never '
                          'once it returned: a handler that parks ends '
                          'that): a call',
    'nxi_uvloop_call': "runs fn on the process layer's loop thread now "
                       "and returns once it has returned: a call",
    'nxi_uvloop_post': "runs fn on the process layer's loop thread next, "
                       "in order with the calls, and keeps it no longer: "
                       "a call that does not wait",
    'nxi_buffer_own': "keeps a protocol module's release function for a "
                      "frame it lent (nx_core_api's own): the module's "
                      "function, not a core layer's",
}
# Structs with function pointers that are not hooks, and why.
CALLBACK_DATA = {
    'nx_buffer': "the program's release function (nx_buffer_own); the "
                 "handler a received buffer runs",
    'nxi_handler': "a handler the program registered (nx_handler_register)",
    'nxi_ref': "the program's release function for a value put by "
               "reference (nx_put_*_ref)",
    'nxi_boot_pmix_plugin': "the table the PMIx bootstrap's plugin "
                            "exports (processes/boot_pmix.h), called by "
                            "its loader in the same folder",
}


def circles(graph):
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    nodes = set(graph) | {w for ws in graph.values() for w in ws}
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def object_name(path, names):
    """The source file an object file was built from: the longest known
    name its file name ends with (meson writes src_rsr_rsr.c.o)."""
    base = re.sub(r'\.c\.o$', '', os.path.basename(path))
    best = None
    for n in names:
        if (base == n or base.endswith('_' + n)) and \
                (best is None or len(n) > len(best)):
            best = n
    return best or base


def call_graph(objdirs, names=()):
    defs, uses = {}, collections.defaultdict(set)
    objs = [o for d in objdirs for o in glob.glob(os.path.join(d, '*.o'))]
    for o in objs:
        name = object_name(o, names) if names else \
            re.sub(r'^src_|\.c\.o$', '', os.path.basename(o))
        text = subprocess.run(['nm', o], capture_output=True, text=True,
                              check=True).stdout
        for line in text.splitlines():
            f = line.split()
            if len(f) == 3 and f[1] in 'TDBRCV':
                defs[f[2]] = name
            elif len(f) == 2 and f[0] == 'U':
                uses[name].add(f[1])
    graph = collections.defaultdict(set)
    why = collections.defaultdict(set)  # (user, definer): the symbols
    for name, syms in uses.items():
        for s in syms:
            if s in defs and defs[s] != name:
                graph[name].add(defs[s])
                why[(name, defs[s])].add(s)
    return graph, why, len(objs)


def include_graph(srcdir):
    graph = {}
    for path in glob.glob(os.path.join(srcdir, '*.[ch]')):
        text = open(path, encoding='utf-8').read()
        graph[os.path.basename(path)] = set(
            h for h in re.findall(r'#include "([^"]+)"', text)
            if os.path.exists(os.path.join(srcdir, h)))
    return graph


def core_sources(src):
    """{relative path: folder} of every .c and .h under nexus/src."""
    out = {}
    for path in glob.glob(os.path.join(src, '**', '*.[ch]'), recursive=True):
        rel = os.path.relpath(path, src)
        out[rel] = rel.split(os.sep)[0]
    return out


def strip_comments(text):
    return re.sub(r'/\*.*?\*/|//[^\n]*', ' ', text, flags=re.S)


def tables_and_setters(src, files):
    """Structs with function-pointer members, and functions declared in
    headers that take a function pointer or a pointer to such a struct:
    {name: (header, folder)} each."""
    # A function pointer, or a core typedef of one (the public nx_*_fn are
    # the program's callbacks, which it passes through the API).
    fnptr = r'\(\s*\*\s*\w*\s*\)\s*\(|\bnxi_\w+_fn\b'
    tables, setters, variables = {}, {}, []
    headers = [f for f in files if f.endswith('.h')]
    for h in headers:
        text = strip_comments(open(os.path.join(src, h),
                                   encoding='utf-8').read())
        for m in re.finditer(r'struct\s+(\w+)\s*\{(.*?)\};', text, re.S):
            if re.search(fnptr, m.group(2)):
                tables[m.group(1)] = (h, files[h])
        for m in re.finditer(r'^extern\s[^;]*\(\s*\*\s*\w+\s*\)\s*\(', text,
                             re.M):
            variables.append((h, m.group(0).strip()))
    hooks = [n for n in tables if n not in CALLBACK_DATA]
    table_ptr = r'struct\s+(' + '|'.join(map(re.escape, hooks)) + r')\s*\*' \
        if hooks else r'(?!x)x'
    for h in headers:
        text = strip_comments(open(os.path.join(src, h),
                                   encoding='utf-8').read())
        for m in re.finditer(r'^[\w\s\*]*?\b(\w+)\s*\(([^;{]*)\)\s*;', text,
                             re.M):
            name, params = m.group(1), m.group(2)
            if re.search(fnptr, params) or re.search(table_ptr, params):
                setters[name] = (h, files[h])
    return tables, setters, variables


def check_core(root, objdirs):
    src = os.path.join(root, 'nexus', 'src')
    files = core_sources(src)
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    failed = 0
    for rel, folder in sorted(files.items()):
        if folder not in rank:
            print(f'nexus/src/{rel}: folder {folder} is not a layer '
                  '(check_layers.py, LAYERS)')
            failed = 1
    if failed:
        return 1
    # Each .c file by its name (they are unique across the folders).
    cfiles = {os.path.splitext(os.path.basename(r))[0]: f
              for r, f in files.items() if r.endswith('.c')}
    calls, why, nobjs = call_graph(objdirs, cfiles)
    if nobjs < 10:
        print(f'only {nobjs} object files in {objdirs}: not the core')
        return 1

    # References between files: down or across only.
    for a in sorted(calls):
        for b in sorted(calls[a]):
            fa, fb = cfiles.get(a), cfiles.get(b)
            if fa is None or fb is None:
                continue
            if rank[fb] > rank[fa]:
                print(f'upward reference: {fa}/{a}.c uses '
                      f'{", ".join(sorted(why[(a, b)]))} of {fb}/{b}.c')
                failed = 1

    # Hooks: installing one is a reference from the hook's file to the
    # installer's.
    tables, setters, variables = tables_and_setters(src, files)
    design = open(os.path.join(root, 'docs', 'design.md'),
                  encoding='utf-8').read()
    for name, (h, folder) in sorted(tables.items()):
        if re.fullmatch(r'nxi_\w+_stages', name):
            if f'struct {name}' not in design:
                print(f'{h}: stage table struct {name} is not in '
                      'docs/design.md ("Stages")')
                failed = 1
        elif name not in CALLBACK_DATA:
            print(f'{h}: struct {name} holds function pointers: a hook; '
                  'make it a stage table (struct nxi_*_stages)')
            failed = 1
    for h, decl in variables:
        print(f'{h}: a function-pointer variable is a hook: {decl}')
        failed = 1
    nstages = 0
    for setter, (h, folder) in sorted(setters.items()):
        if setter in NOT_HOOKS:
            continue
        staged = re.fullmatch(r'nxi_\w+_stages_set', setter)
        # The file that defines the setter, and those that call it.
        pairs = [(a, b) for (a, b), syms in why.items() if setter in syms]
        callers = sorted(a for a, _ in pairs)
        owner = pairs[0][1] if pairs else None
        for caller in callers:
            if staged:
                nstages += 1
                continue
            print(f'hook: {cfiles.get(caller)}/{caller}.c installs a '
                  f'function in {cfiles.get(owner)}/{owner}.c through '
                  f'{setter} ({h}): a reference from {owner}.c up to '
                  f'{caller}.c; use a stage table')
            failed = 1
            calls[owner].add(caller)

    for c in circles(calls):
        print('circle of calls:', ' <-> '.join(c))
        failed = 1

    # Includes: down or across only, and no circles.
    incs = {}
    for rel, folder in files.items():
        text = open(os.path.join(src, rel), encoding='utf-8').read()
        incs[rel] = set()
        for inc in re.findall(r'#include "([^"]+)"', text):
            if inc in files:
                incs[rel].add(inc)
                if rank[files[inc]] > rank[folder]:
                    print(f'upward include: nexus/src/{rel} includes {inc}')
                    failed = 1
    for c in circles(incs):
        print('circle of includes:', ' <-> '.join(c))
        failed = 1

    for path in glob.glob(os.path.join(root, 'nexus', '**', '*.[ch]'),
                          recursive=True):
        for inc in re.findall(r'#include "([^"]+)"',
                              open(path, encoding='utf-8').read()):
            if 'protocols' in inc or inc.startswith(('nxmod', 'tcp', 'ucx',
                                                     'ofi', 'mpimod')):
                print(f'{os.path.relpath(path, root)} includes {inc}')
                failed = 1
    print(f'{nobjs} object files in {len(LAYERS)} layers '
          f'({" < ".join(LAYERS)}), {len(tables)} tables of function '
          f'pointers, {nstages} stage registrations: ' +
          ('layering broken' if failed else 'every reference points down'))
    return failed


def check_protocols(build, root, names):
    """Each module folder: no circle of calls between its object files,
    none of includes between its .c and .h files."""
    failed = 0
    for m in names:
        objdir = os.path.join(build, 'protocols', m, f'libnx_proto_{m}.so.p')
        calls, _, nobjs = call_graph([objdir])
        if nobjs == 0:
            print(f'{m}: no object files in {objdir}')
            failed = 1
            continue
        incs = include_graph(os.path.join(root, 'protocols', m))
        bad = 0
        for c in circles(calls):
            print(f'{m}: circle of calls:', ' <-> '.join(c))
            bad = 1
        for c in circles(incs):
            print(f'{m}: circle of includes:', ' <-> '.join(c))
            bad = 1
        print(f'{m}: {nobjs} object files, {len(incs)} sources: ' +
              ('circles' if bad else 'no circles'))
        failed |= bad
    return failed


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ('-h', '--help'):
        print(__doc__)
        return 0
    if sys.argv[1] == '--protocols':
        return check_protocols(sys.argv[2], sys.argv[3], sys.argv[4:])
    return check_core(sys.argv[1], sys.argv[2:])


if __name__ == '__main__':
    sys.exit(main())
