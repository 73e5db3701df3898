#!/usr/bin/env python3
# The driver's import graph (`use crate::...` between its files, kext/ and proto/ as leaves),
# and a check that it has no circle (Documentation/design.md draws it). A child module's use of
# its parent (`super::`, the qp engines using QpInner) is the module's own structure and not
# counted. Run by scripts/lint.sh.
#   import-graph.py [--check] [RXE_RS_DIR]
import glob
import os
import re
import sys
args=[a for a in sys.argv[1:] if a != '--check']
check='--check' in sys.argv
root=args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'rxe_rs')
files=[f for f in glob.glob(root+'/**/*.rs',recursive=True) if '/proto/' not in f and '/kext/' not in f]
def modname(f):
    rel=os.path.relpath(f,root)[:-3]
    if rel.endswith('/mod'): rel=rel[:-4]
    return rel.replace('/','::')
names={modname(f) for f in files}|{'kext','proto','uapi'}
def resolve(path):
    # longest known module prefix
    parts=path.split('::')
    for n in range(len(parts),0,-1):
        cand='::'.join(parts[:n])
        if cand in names: return cand
    return None
edges={}
for f in files:
    me=modname(f)
    src=open(f).read()
    src=re.sub(r'#\[cfg\(test\)\][\s\S]*','',src)
    refs=set()
    def items(prefix,body):
        depth=0;cur='';out=[]
        for ch in body:
            if ch=='{':depth+=1
            if ch=='}':depth-=1
            if ch==',' and depth==0: out.append(cur);cur=''
            else: cur+=ch
        out.append(cur)
        for it in out:
            it=it.strip()
            if not it: continue
            m=re.match(r'([a-z_:]+?)(::\{([\s\S]*)\})?$',it)
            head=re.split(r'::\{',it)[0]
            if '::{' in it:
                inner=it[it.index('::{')+3:-1]
                items(prefix+head+'::',inner)
            else:
                refs.add(prefix+it.split(' ')[0])
    for m in re.finditer(r'use crate::\{([\s\S]*?)\};',src): items('',m.group(1))
    for m in re.finditer(r'crate::([a-z_:]+)',src): refs.add(m.group(1))
    parent=me.rsplit('::',1)[0] if '::' in me else ''
    for m in re.finditer(r'\bsuper::([a-z_:]+)',src): refs.add((parent+'::' if parent else '')+m.group(1))
    for m in re.finditer(r'^(?:pub\(crate\) )?mod ([a-z_]+);',src,re.M): pass
    for m in re.finditer(r'^use ([a-z_]+)::',src,re.M):
        c=me+'::'+m.group(1)
        if c in names: refs.add(c)
    tgt=set()
    for r in refs:
        t=resolve(r.rstrip(':'))
        if t and t!=me and not me.startswith(t+'::') : tgt.add(t)
    edges[me]=sorted(tgt)
for k in sorted(edges): print(f"{k:22} -> {' '.join(edges[k])}")
# cycles: SCCs
import sys
sys.setrecursionlimit(10000)
idx={};low={};st=[];on=set();sccs=[];c=[0]
def sc(v):
    idx[v]=low[v]=c[0];c[0]+=1;st.append(v);on.add(v)
    for w in edges.get(v,[]):
        if w not in edges: continue
        if w not in idx: sc(w);low[v]=min(low[v],low[w])
        elif w in on: low[v]=min(low[v],idx[w])
    if low[v]==idx[v]:
        comp=[]
        while True:
            w=st.pop();on.discard(w);comp.append(w)
            if w==v:break
        if len(comp)>1: sccs.append(sorted(comp))
for v in edges:
    if v not in idx: sc(v)
print("circles:", sccs or "none")
bad = sccs
if check and bad:
    print("import-graph: a new import circle:", bad, file=sys.stderr)
    sys.exit(1)
