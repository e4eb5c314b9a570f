// jaxside's HTML views: linking torch rows and JAX statements, folds, jumps to defs and back,
// copies of one column's code, and keys to step through the statements.
(() => {
  const rowsOf = (section, first, last) => {
    const found = [];
    for (let n = first; n <= last; n++) {
      const row = document.getElementById(`${section}-L${n}`);
      if (row) found.push(row);
    }
    return found;
  };
  // A statement's site: "line col end_line end_col" (columns in characters) in its section's file.
  const siteOf = st => {
    const row = st.closest('tr');
    const [l1, c1, l2, c2] = st.dataset.site.split(' ').map(Number);
    return {section: row.dataset.f, l1, c1, l2, c2};
  };
  const markSite = (site, cls) => {
    const rows = rowsOf(site.section, site.l1, site.l2);
    rows.forEach(row => {
      const n = +row.dataset.l;
      row.querySelectorAll('td.t i[data-c]').forEach(piece => {
        const c = +piece.dataset.c;
        if ((n > site.l1 || c >= site.c1) && (n < site.l2 || c < site.c2)) piece.classList.add(cls);
      });
    });
    return rows;
  };
  const group = row => row.dataset.g ? document.querySelectorAll(`tr[data-g="${row.dataset.g}"]`) : [row];
  const clear = cls => document.querySelectorAll('.' + cls).forEach(e => e.classList.remove(cls));

  // The JAX statements a torch position made: those whose site is the innermost holding it.
  const sited = {};
  document.querySelectorAll('.st[data-site]').forEach(st => {
    const site = siteOf(st);
    (sited[site.section] = sited[site.section] || []).push([st, site]);
  });
  const madeAt = (row, column) => {
    const line = +row.dataset.l;
    let best = [], size = Infinity;
    (sited[row.dataset.f] || []).forEach(([st, s]) => {
      if ((line < s.l1 || (line === s.l1 && column < s.c1)) || (line > s.l2 || (line === s.l2 && column >= s.c2)))
        return;
      const extent = (s.l2 - s.l1) * 1e6 + (s.c2 - s.c1) - (s.l2 > s.l1 ? s.c1 : 0);
      if (extent < size) { best = [st]; size = extent; } else if (extent === size) best.push(st);
    });
    return best;
  };
  const light = (sts, cls) => {
    sts.forEach(st => st.classList.add(cls));
    return sts.length ? markSite(siteOf(sts[0]), cls === 'hot' ? 'mk' : 'pin') : [];
  };

  // Hover: a JAX statement lights its torch span; a torch expression, the statements it made; a torch
  // row elsewhere, its statement's rows and JAX.
  document.addEventListener('mouseover', event => {
    if (event.buttons) return;  // a drag is selecting
    clear('hot'); clear('mk');
    const st = event.target.closest('.st[data-site]');
    if (st) return void light([st], 'hot');
    const row = event.target.closest('tr.r');
    const piece = event.target.closest('td.t i[data-c]');
    if (row && piece) {
      const made = madeAt(row, +piece.dataset.c);
      if (made.length) return void made.forEach(s => light([s], 'hot'));
    }
    if (row) group(row).forEach(r => r.classList.add('hot'));
  });

  // Folds: open and close from their bar; closed, their cells are hidden until found.
  const setFold = (fold, open) => {
    fold.classList.toggle('closed', !open);
    const bar = fold.querySelector('tr.bar button');
    if (bar) bar.setAttribute('aria-expanded', open);
    fold.querySelectorAll('.fc').forEach(cell =>
      open ? cell.removeAttribute('hidden') : cell.setAttribute('hidden', 'until-found'));
  };
  const openFolds = element => {
    const fold = element.closest('tbody.fold');
    if (fold && fold.classList.contains('closed')) setFold(fold, true);
  };
  // The browser's find (or a link to a text fragment) reached folded code: open its fold.
  document.addEventListener('beforematch', event => openFolds(event.target), true);
  const flash = element => {
    element.classList.remove('flash'); void element.offsetWidth; element.classList.add('flash');
  };
  const reveal = (element, flashing = true) => {
    if (!element) return;
    openFolds(element);
    const row = element.closest('tr') || element;
    row.scrollIntoView({block: 'center'});
    if (flashing) flash(row);
  };
  const offScreen = element => {
    const box = element.getBoundingClientRect();
    return box.top < 0 || box.bottom > innerHeight;
  };
  const pin = st => {
    clear('pin');
    const rows = light([st], 'pin');
    if (rows.length && offScreen(rows[0])) reveal(rows[0]);
    else if (rows.length) rows.forEach(flash);
  };

  // Click: pin a JAX statement with its torch span, the statements a torch expression made, or a row.
  document.addEventListener('click', event => {
    if (event.target.closest('a, button')) return;
    if (!getSelection().isCollapsed) return;  // the end of a drag
    const row = event.target.closest('tr.r');
    if (!row) return;
    const st = event.target.closest('.st[data-site]');
    if (st) return void pin(st);
    clear('pin');
    const piece = event.target.closest('td.t i[data-c]');
    const made = piece ? madeAt(row, +piece.dataset.c) : [];
    if (made.length) {
      made.forEach(s => light([s], 'pin'));
      if (offScreen(made[0])) reveal(made[0]);
      made.forEach(flash);
    } else {
      group(row).forEach(r => r.classList.add('pin'));
    }
  });

  document.querySelectorAll('tr.bar button').forEach(button => button.addEventListener('click', () => {
    const fold = button.closest('tbody.fold');
    setFold(fold, fold.classList.contains('closed'));
  }));
  const toggleAll = document.getElementById('unfold');
  if (toggleAll) toggleAll.addEventListener('click', () => {
    const folds = document.querySelectorAll('tbody.fold');
    const open = [...folds].some(f => f.classList.contains('closed'));
    folds.forEach(f => setFold(f, open));
    toggleAll.textContent = open ? 'fold again' : 'unfold all';
  });

  // Keys: j / k step to the next / previous JAX statement shown, Enter reveals its torch partner.
  // (inside a closed fold a statement still has boxes: `hidden=until-found` only skips painting)
  const shown = () => [...document.querySelectorAll('.st')].filter(
    st => st.getClientRects().length && !st.closest('[hidden]'));
  document.addEventListener('focusin', event => {
    const st = event.target.closest && event.target.closest('.st');
    if (!st) return;
    clear('hot'); clear('mk');
    if (st.dataset.site) light([st], 'hot');
    else st.classList.add('hot');
  });
  document.addEventListener('keydown', event => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target.closest && event.target.closest('input, textarea, select, [contenteditable]')) return;
    const current = document.activeElement && document.activeElement.closest
      ? document.activeElement.closest('.st') : null;
    if (event.key === 'j' || event.key === 'k') {
      const all = shown();
      if (!all.length) return;
      let index = all.indexOf(current);
      if (index < 0) {  // from the first statement on screen
        index = all.findIndex(st => st.getBoundingClientRect().top >= 0);
        if (index < 0) index = all.length - 1;
      } else {
        index = Math.min(all.length - 1, Math.max(0, index + (event.key === 'j' ? 1 : -1)));
      }
      all[index].focus({preventScroll: true});
      all[index].scrollIntoView({block: 'nearest'});
      event.preventDefault();
    } else if (event.key === 'Enter' && current) {
      if (current.dataset.site) pin(current);
      else { clear('pin'); group(current.closest('tr')).forEach(r => { r.classList.add('pin'); flash(r); }); }
      event.preventDefault();
    }
  });

  // Copies: a selection copies the code of the column it started in, with its indentation, without
  // badges, labels or the other column. While a drag lasts, the other columns are not selectable.
  const columnOf = node => {
    const element = node && (node.nodeType === 1 ? node : node.parentElement);
    const cell = element && element.closest('td');
    return cell ? ['t', 'j', 'q'].find(c => cell.classList.contains(c)) || null : null;
  };
  document.addEventListener('mousedown', event => {
    const column = columnOf(event.target);
    if (column) document.body.dataset.col = column;
    else delete document.body.dataset.col;
  });
  const codeOf = range => {
    const column = columnOf(range.startContainer) || columnOf(range.endContainer);
    if (!column) return null;
    let root = range.commonAncestorContainer;
    if (root.nodeType !== 1) root = root.parentElement;
    const own = root.closest('.ln');
    const lines = [];
    (own ? [own] : [...root.querySelectorAll('.ln')]).forEach(ln => {
      if (!range.intersectsNode(ln) || !ln.getClientRects().length || ln.closest('.lab')) return;
      if (columnOf(ln) !== column || ln.closest('[hidden]')) return;
      const part = document.createRange();
      part.selectNodeContents(ln);
      if (ln.contains(range.startContainer)) part.setStart(range.startContainer, range.startOffset);
      if (ln.contains(range.endContainer)) part.setEnd(range.endContainer, range.endOffset);
      const copy = document.createElement('div');
      copy.append(part.cloneContents());
      copy.querySelectorAll('.cnt, .call, .tool, .lab').forEach(e => e.remove());
      lines.push(copy.textContent.replace(/\s+$/, ''));
    });
    return lines.length ? lines.join('\n') + (lines.length > 1 ? '\n' : '') : null;
  };
  document.addEventListener('copy', event => {
    const selection = getSelection();
    if (!event.clipboardData || !selection.rangeCount || selection.isCollapsed) return;
    const text = codeOf(selection.getRangeAt(0));
    if (text === null) return;
    event.clipboardData.setData('text/plain', text);
    event.preventDefault();
  });
  // "copy def": select the def's JAX (its statements sit beside the torch def's lines) and copy it.
  const selectDef = st => {
    const row = st.closest('tr');
    const rows = rowsOf(row.dataset.f, +row.dataset.l, +st.dataset.end || +row.dataset.l);
    const last = rows.map(r => [...r.querySelectorAll('td.j .st')].pop()).filter(Boolean).pop() || st;
    const range = document.createRange();
    range.setStartBefore(st);
    range.setEndAfter(last);
    document.body.dataset.col = 'j';
    getSelection().removeAllRanges();
    getSelection().addRange(range);
  };
  document.addEventListener('click', event => {
    const button = event.target.closest('button[data-copy=def]');
    if (!button) return;
    selectDef(button.closest('.st'));
    const done = document.execCommand('copy');
    button.textContent = done ? 'copied' : 'selected: copy it';
    setTimeout(() => { button.textContent = 'copy def'; }, 1500);
  });

  // The reader's theme and code size, kept in the browser for every page (where storage is allowed).
  const root = document.documentElement;
  const stored = key => { try { return localStorage.getItem(key); } catch (error) { return null; } };
  const store = (key, value) => {
    try { if (value === null) localStorage.removeItem(key); else localStorage.setItem(key, value); }
    catch (error) { /* a sandboxed frame: the choice lasts until the page closes */ }
  };
  const themes = ['auto', 'light', 'dark'];
  const themeButton = document.getElementById('theme');
  let theme = themes.includes(stored('jaxside-theme')) ? stored('jaxside-theme') : 'auto';
  const showTheme = () => {
    if (theme === 'auto') delete root.dataset.theme; else root.dataset.theme = theme;
    if (themeButton) themeButton.textContent = `theme: ${theme}`;
  };
  showTheme();
  if (themeButton) themeButton.addEventListener('click', () => {
    theme = themes[(themes.indexOf(theme) + 1) % themes.length];
    showTheme();
    store('jaxside-theme', theme === 'auto' ? null : theme);
  });
  let size = Math.min(24, Math.max(9, +stored('jaxside-size') || 13));
  const showSize = () => root.style.setProperty('--size', `${size}px`);
  showSize();
  [['smaller', -1], ['larger', 1]].forEach(([id, step]) => {
    const button = document.getElementById(id);
    if (button) button.addEventListener('click', () => {
      size = Math.min(24, Math.max(9, size + step));
      showSize();
      store('jaxside-size', size === 13 ? null : size);
    });
  });

  // Jumps: a call goes to its def; Back (the button or the browser's) returns to the call.
  const back = document.getElementById('back');
  const trail = [];
  const showBack = () => {
    back.classList.toggle('on', trail.length > 0);
    if (trail.length) back.textContent = `← back to ${trail[trail.length - 1].label}`;
  };
  const go = (id, flashing = true) => reveal(document.getElementById(id), flashing);
  document.querySelectorAll('a[href^="#"]').forEach(link => link.addEventListener('click', event => {
    event.preventDefault();
    const from = link.closest('tr');
    const target = link.getAttribute('href').slice(1);
    if (from && from.id) {
      const file = from.closest('table[data-name]');  // a torch row: its file's name and line
      trail.push({id: from.id, label: from.dataset.label || (file ? `${file.dataset.name}:${from.dataset.l}` : from.id)});
      history.replaceState(null, '', '#' + from.id);
      history.pushState({from: from.id}, '', '#' + target);
    } else {
      history.pushState(null, '', '#' + target);
    }
    go(target);
    showBack();
  }));
  window.addEventListener('popstate', () => {
    const id = location.hash.slice(1);
    if (trail.length && trail[trail.length - 1].id === id) trail.pop();
    go(id);
    showBack();
  });
  if (back) back.addEventListener('click', () => history.back());
  if (location.hash && !location.hash.startsWith('#:~:')) go(location.hash.slice(1), false);
})();
