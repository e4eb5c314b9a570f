// jaxside's HTML views: linking torch rows and JAX statements, folds, jumps to defs and back.
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

  // Hover: a torch row lights its statement's rows and JAX; a JAX statement lights its torch span.
  document.addEventListener('mouseover', event => {
    clear('hot'); clear('mk');
    const st = event.target.closest('.st[data-site]');
    if (st) {
      st.classList.add('hot');
      markSite(siteOf(st), 'mk');
      return;
    }
    const row = event.target.closest('tr.r');
    if (row) group(row).forEach(r => r.classList.add('hot'));
  });

  const openFolds = element => {
    for (let fold = element.closest('tbody.fold'); fold; fold = fold.parentElement.closest('tbody.fold'))
      fold.classList.remove('closed');
  };
  const reveal = (element, flash = true) => {
    if (!element) return;
    openFolds(element);
    const row = element.closest('tr') || element;
    row.scrollIntoView({block: 'center'});
    if (flash) { row.classList.remove('flash'); void row.offsetWidth; row.classList.add('flash'); }
  };

  // Click: pin a row (and its statement), or a JAX statement with its torch span, scrolled into view.
  document.addEventListener('click', event => {
    if (event.target.closest('a, button')) return;
    const st = event.target.closest('.st[data-site]');
    const row = event.target.closest('tr.r');
    if (!row) return;
    clear('pin');
    if (st) {
      st.classList.add('pin');
      const rows = markSite(siteOf(st), 'pin');
      const box = rows.length ? rows[0].getBoundingClientRect() : null;
      if (box && (box.top < 0 || box.bottom > innerHeight)) reveal(rows[0]);
    } else {
      group(row).forEach(r => r.classList.add('pin'));
    }
  });

  // Folds open and close from their bar.
  document.querySelectorAll('tr.bar button').forEach(button => button.addEventListener('click', () =>
    button.closest('tbody.fold').classList.toggle('closed')));
  const toggleAll = document.getElementById('unfold');
  if (toggleAll) toggleAll.addEventListener('click', () => {
    const folds = document.querySelectorAll('tbody.fold');
    const open = [...folds].some(f => f.classList.contains('closed'));
    folds.forEach(f => f.classList.toggle('closed', !open));
    toggleAll.textContent = open ? 'fold again' : 'unfold all';
  });

  // Jumps: a call goes to its def; Back (the button or the browser's) returns to the call.
  const back = document.getElementById('back');
  const trail = [];
  const showBack = () => {
    back.classList.toggle('on', trail.length > 0);
    if (trail.length) back.textContent = `← back to ${trail[trail.length - 1].label}`;
  };
  const go = (id, flash = true) => reveal(document.getElementById(id), flash);
  document.querySelectorAll('a[href^="#"]').forEach(link => link.addEventListener('click', event => {
    event.preventDefault();
    const from = link.closest('tr');
    const target = link.getAttribute('href').slice(1);
    if (from && from.id) {
      trail.push({id: from.id, label: from.dataset.label || from.id});
      history.replaceState(null, '', '#' + from.id);
      history.pushState({from: from.id}, '', '#' + target);
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
  if (location.hash) go(location.hash.slice(1), false);
})();
