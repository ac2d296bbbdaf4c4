#!/usr/bin/env python3
"""Checks the core's layering (docs/design.md, "Layers"): no circle of
calls between the files of nexus/src (from the symbols each object file
defines and uses, read with nm), no circle of includes between its headers,
and no file under nexus/ that includes a protocol's header.

With --protocols, checks each protocol module's folder the same way: no
circle of calls between its object files, no circle of includes between
its files (docs/modules.md, "Inside a module").

Usage: check_layers.py OBJECT_DIR SOURCE_ROOT
       check_layers.py --protocols BUILD_ROOT SOURCE_ROOT NAME..."""
import collections
import glob
import os
import re
import subprocess
import sys


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


def call_graph(objdir):
    defs, uses = {}, collections.defaultdict(set)
    objs = glob.glob(os.path.join(objdir, '*.o'))
    for o in objs:
        name = re.sub(r'^src_|\.c\.o$', '', os.path.basename(o))
        text = subprocess.run(['nm', o], capture_output=True, text=True,
                              check=True).stdout
        for line in text.splitlines():
            f = line.split()
            if len(f) == 3 and f[1] in 'TDBRCV':
                defs[f[2]] = name
            elif len(f) == 2 and f[0] == 'U':
                uses[name].add(f[1])
    graph = collections.defaultdict(set)
    for name, syms in uses.items():
        for s in syms:
            if s in defs and defs[s] != name:
                graph[name].add(defs[s])
    return graph, len(objs)


def include_graph(srcdir):
    graph = {}
    for path in glob.glob(os.path.join(srcdir, '*.[ch]')):
        text = open(path, encoding='utf-8').read()
        graph[os.path.basename(path)] = set(
            h for h in re.findall(r'#include "([^"]+)"', text)
            if os.path.exists(os.path.join(srcdir, h)))
    return graph


def check_protocols(build, root, names):
    """Each module folder: no circle of calls between its object files,
    none of includes between its .c and .h files."""
    failed = 0
    for m in names:
        objdir = os.path.join(build, 'protocols', m, f'libnx_proto_{m}.so.p')
        calls, nobjs = call_graph(objdir)
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
    if sys.argv[1] == '--protocols':
        return check_protocols(sys.argv[2], sys.argv[3], sys.argv[4:])
    objdir, root = sys.argv[1], sys.argv[2]
    failed = 0
    calls, nobjs = call_graph(objdir)
    if nobjs < 10:
        print(f'only {nobjs} object files in {objdir}: not the core')
        return 1
    for c in circles(calls):
        print('circle of calls:', ' <-> '.join(c))
        failed = 1
    for c in circles(include_graph(os.path.join(root, 'nexus', 'src'))):
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
    print(f'{nobjs} files of nexus/src: ' +
          ('layering broken' if failed else 'no circles'))
    return failed


if __name__ == '__main__':
    sys.exit(main())
