//! Code generation: the user's fn, re-emitted piece by piece around a locked body.

use std::collections::BTreeMap;

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::{ToTokens, TokenStreamExt, format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{
    AttrStyle, Block, FnArg, Ident, ItemFn, LitStr, Pat, ReturnType, Signature, Token, Type,
};

use crate::attr::{DEFAULT_MAX_NAMES, Kind, LockArgs, OnLost};
use crate::template::{NamePart, NameTemplate, Placeholder};

/// Expands `#[distributed_lock(args)] item`. Whatever goes wrong, the user's fn is emitted as
/// written next to the error, so the rest of the crate (and the IDE) keeps working.
pub(crate) fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let func: ItemFn = match syn::parse2(item.clone()) {
        Ok(func) => func,
        Err(_) => {
            let error = syn::Error::new(
                Span::call_site(),
                "`#[distributed_lock]` can only be applied to an `async fn`",
            );
            return with_error(item, error);
        }
    };
    let args: LockArgs = match syn::parse2(args) {
        Ok(args) => args,
        Err(error) => return with_error(func.into_token_stream(), error),
    };
    match gen_function(&func, &args) {
        Ok(tokens) => tokens,
        Err(error) => with_error(func.into_token_stream(), error),
    }
}

/// `tokens` with every span (also inside groups) set to `span`.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tree| {
            if let TokenTree::Group(group) = &tree {
                let mut inner = Group::new(group.delimiter(), respan(group.stream(), span));
                inner.set_span(span);
                tree = TokenTree::Group(inner);
            } else {
                tree.set_span(span);
            }
            tree
        })
        .collect()
}

fn with_error(item: TokenStream, error: syn::Error) -> TokenStream {
    let error = error.into_compile_error();
    quote!(#item #error)
}

/// Collects several errors into one, so the user sees them all at once.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    fn check<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|e| self.push(e)).ok()
    }

    fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

/// Re-emits the user's fn as written (attributes, visibility, signature), around the body
/// built by [`gen_body`].
fn gen_function(func: &ItemFn, args: &LockArgs) -> syn::Result<TokenStream> {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = func;
    let Signature {
        constness,
        asyncness,
        unsafety,
        abi,
        fn_token,
        ident,
        generics,
        paren_token,
        inputs,
        variadic,
        output,
    } = sig;

    let body = gen_body(sig, block, args)?;

    let (outer_attrs, inner_attrs): (Vec<_>, Vec<_>) = attrs
        .iter()
        .partition(|attr| matches!(attr.style, AttrStyle::Outer));
    let (lt_token, params, gt_token, where_clause) = (
        &generics.lt_token,
        &generics.params,
        &generics.gt_token,
        &generics.where_clause,
    );

    let mut tokens = quote! {
        #(#outer_attrs)*
        #vis #constness #asyncness #unsafety #abi #fn_token #ident #lt_token #params #gt_token
    };
    paren_token.surround(&mut tokens, |tokens| {
        inputs.to_tokens(tokens);
        variadic.to_tokens(tokens);
    });
    output.to_tokens(&mut tokens);
    where_clause.to_tokens(&mut tokens);
    block.brace_token.surround(&mut tokens, |tokens| {
        tokens.append_all(inner_attrs);
        tokens.extend(body);
    });
    Ok(tokens)
}

/// The new body of the fn: the checks of the signature and the name, then the statements that
/// format the name, get the client, open the span and run the user's `block` under the lock.
fn gen_body(sig: &Signature, block: &Block, args: &LockArgs) -> syn::Result<TokenStream> {
    let (return_type, name) = check_signature(sig, args)?;
    let krate = args
        .krate
        .as_ref()
        .map_or_else(|| quote!(::lock_runtime), ToTokens::to_token_stream);
    let private = quote!(#krate::__private);

    // Generated locals: prefixed, and invisible to the user's code (mixed-site hygiene).
    let local = |name: &str| format_ident!("__lock_{}", name, span = Span::mixed_site());
    let (name_var, client_var, span_var) = (local("name"), local("client"), local("span"));

    let client = gen_client(args, &private);
    let kind = gen_kind(args, &private);
    let options = gen_options(args, &private);
    // The template as written is the lock's group in the metrics (bounded, unlike the names).
    let group = args.name().map(|name| name.lit.clone())?;
    let locked = quote!(#client_var, #name_var, #kind, #group, #options);
    let (names, run) = match name {
        Names::One(name) => (
            quote! {
                #[allow(clippy::useless_format)]
                let #name_var: ::std::string::String = #name;
            },
            quote!(#private::run_locked),
        ),
        Names::Each(each) => {
            let max = args
                .max_names
                .as_ref()
                .map_or(DEFAULT_MAX_NAMES, |m| m.value) as usize;
            (
                gen_each_name(&each, &private, &name_var, max),
                quote!(#private::run_locked_all),
            )
        }
    };
    let tail = gen_tail(&private, run, locked, block, return_type, &span_var);
    let fn_name = LitStr::new(&sig.ident.to_string(), sig.ident.span());
    let deprecations = args
        .deprecated_key
        .map(|span| deprecated_key(span, &private));

    Ok(quote! {
        #deprecations
        #names
        let #client_var = #client;
        let #span_var = #private::tracing::info_span!(
            target: ::core::module_path!(),
            "distributed_lock",
            function = #fn_name,
            lock = %#name_var,
        );
        #tail
    })
}

/// Checks that the fn is `async`, its return type ([`check_return_type`]) and the
/// placeholders of the name ([`name_expr`]), reporting every error at once.
fn check_signature(sig: &Signature, args: &LockArgs) -> syn::Result<((Type, Span), Names)> {
    let mut errors = Errors::default();
    if sig.asyncness.is_none() {
        errors.push(syn::Error::new(
            sig.fn_token.span,
            "the `async` keyword is missing from the function declaration: \
             `#[distributed_lock]` works on `async fn` only",
        ));
    }
    let return_type = errors.check(check_return_type(sig));
    let name = errors
        .check(args.name())
        .and_then(|name| errors.check(name_expr(name, sig)));
    errors.finish()?;
    let (Some(return_type), Some(name)) = (return_type, name) else {
        unreachable!("errors were reported above");
    };
    Ok((return_type, name))
}

/// The deprecation warning for `key = "…"`, at the `key` token: the use of a deprecated item of
/// the runtime (the way to warn from a proc macro on stable Rust), named so that the warning
/// reads as what it is. `#[allow(deprecated)]` silences it.
fn deprecated_key(span: Span, private: &TokenStream) -> TokenStream {
    let item = Ident::new("distributed_lock_key_argument", span);
    quote_spanned! {span=>
        let _ = #private::#item;
    }
}

/// The expression that gives the `LockClient`: the `client` argument, or the default client.
fn gen_client(args: &LockArgs, private: &TokenStream) -> TokenStream {
    match &args.client {
        // Borrowed, not moved (`self.locks` stays usable), and cloned: a cheap `Arc` clone.
        // Anything that derefs to a `LockClient` works: `LockClient`, `&LockClient`, `Arc<…>`.
        Some(expr) => {
            // An invisible group keeps `expr` one operand (like `$e:expr` in `macro_rules!`)
            // and lets a type error point at the whole expression.
            let span = expr.span();
            let expr = Group::new(Delimiter::None, expr.to_token_stream());
            quote_spanned! {span=>
                ::core::result::Result::Ok(
                    <#private::LockClient as ::core::clone::Clone>::clone(&#expr)
                )
            }
        }
        None => quote!(#private::LockClient::default_client()),
    }
}

/// The `Kind` value: which primitive `run_locked` takes.
fn gen_kind(args: &LockArgs, private: &TokenStream) -> TokenStream {
    match args.kind() {
        Kind::Mutex => quote!(#private::Kind::Mutex),
        Kind::FencedMutex => quote!(#private::Kind::FencedMutex),
        Kind::Fair => quote!(#private::Kind::Fair),
        Kind::Read => quote!(#private::Kind::Read),
        Kind::Write => quote!(#private::Kind::Write),
        Kind::Semaphore { permits, capacity } => quote! {
            #private::Kind::Semaphore { permits: #permits, capacity: #capacity }
        },
    }
}

/// The `LockOptions` expression and the `OnLost` value, as two arguments of `run_locked`.
fn gen_options(args: &LockArgs, private: &TokenStream) -> TokenStream {
    let mut options = quote!(#private::LockOptions::new());
    if let Some(wait) = &args.wait {
        let ms = wait.millis;
        options.extend(quote!(.wait(::core::time::Duration::from_millis(#ms))));
    }
    if let Some(lease) = &args.lease {
        let ms = lease.millis;
        options.extend(quote!(.lease(::core::time::Duration::from_millis(#ms))));
    }
    if let Some(max_hold) = &args.max_hold {
        let ms = max_hold.millis;
        options.extend(quote!(.max_hold(::core::time::Duration::from_millis(#ms))));
    }
    let on_lost = match args.on_lost.unwrap_or(OnLost::Abort) {
        OnLost::Abort => quote!(#private::OnLost::Abort),
        OnLost::Ignore => quote!(#private::OnLost::Ignore),
    };
    quote!(#options, #on_lost)
}

/// The statement that collects the lock names of a template over a collection into a
/// `LockNameSet` bound to `names_var`: one name per element, taken from
/// `(&&&Collection(&path)).lock_name_items()`. Method resolution picks `ByRef` (`&path`
/// iterates), then `ByDeref` (`&*path` iterates), then the fallback defined here, whose unmet
/// bound is the compile error naming the path (a trait local to the fn, so its
/// `on_unimplemented` message can name it).
fn gen_each_name(
    each: &EachName,
    private: &TokenStream,
    names_var: &Ident,
    max: usize,
) -> TokenStream {
    let EachName {
        template,
        collection,
        path,
        item,
        name,
    } = each;
    let span = template.span();
    let message = LitStr::new(
        &format!("`{path}` in the lock name template is not a collection"),
        span,
    );
    let label = LitStr::new(
        &format!(
            "`[]` needs a collection here: `&{path}` (or `&*{path}`) must implement `IntoIterator`"
        ),
        span,
    );
    let note = LitStr::new(
        &format!(
            "`{}` takes a lock name for every element of `{path}`: a `Vec`, slice, array, set or \
             map, or a reference or smart pointer to one",
            template.value()
        ),
        span,
    );
    quote_spanned! {span=>
        let #names_var = {
            let mut #names_var = #private::LockNameSet::new(#template, #max);
            #[allow(unused_imports)]
            use #private::{ByDeref as _, ByRef as _};
            #[diagnostic::on_unimplemented(message = #message, label = #label, note = #note)]
            trait __LockCollection {
                type Iter: ::core::iter::Iterator;
                fn lock_name_items(self) -> Self::Iter;
            }
            #[allow(dead_code)]
            trait __LockNotACollection: ::core::marker::Sized {
                fn lock_name_items(self) -> <Self as __LockCollection>::Iter
                where
                    Self: __LockCollection,
                {
                    <Self as __LockCollection>::lock_name_items(self)
                }
            }
            impl<T> __LockNotACollection for &#private::Collection<T> {}
            for #item in (&&&#private::Collection(&(#collection))).lock_name_items() {
                #names_var.insert(#name);
            }
            #names_var
        };
    }
}

/// The tail expression, `Instrument::instrument(run(…, async move { block }), span).await`,
/// with its own tokens spanned at the return type, so "must return `Result<T, E>`" points
/// there (rustc reports the bound at the whole call and again at the `.await`). `run` is
/// `run_locked` or `run_locked_all`, and `locked` its arguments before the future.
fn gen_tail(
    private: &TokenStream,
    run: TokenStream,
    locked: TokenStream,
    block: &Block,
    (fake_return_type, return_span): (Type, Span),
    span_var: &Ident,
) -> TokenStream {
    // Like tracing's `#[instrument]`: a never-taken `return` of the declared type as the first
    // statement, so `?` and `return` in the body infer the fn's return type eagerly.
    let fake_return = quote_spanned! {return_span=>
        #[allow(
            unknown_lints,
            unreachable_code,
            clippy::diverging_sub_expression,
            clippy::empty_loop,
            clippy::let_unit_value,
            clippy::let_with_type_underscore,
            clippy::needless_return,
            clippy::unreachable
        )]
        if false {
            let __lock_fake_return: #fake_return_type = loop {};
            return __lock_fake_return;
        }
    };
    let mut run_locked = respan(run, return_span);
    let mut call_args = Group::new(
        Delimiter::Parenthesis,
        quote! {
            #locked, async move {
                #fake_return
                #block
            }
        },
    );
    call_args.set_span(return_span);
    run_locked.append(call_args);
    let mut tail = respan(
        quote!(#private::tracing::Instrument::instrument),
        return_span,
    );
    let mut instrument_args = Group::new(Delimiter::Parenthesis, quote!(#run_locked, #span_var));
    instrument_args.set_span(return_span);
    tail.append(instrument_args);
    tail.extend(respan(quote!(.await), return_span));
    tail
}

/// Checks the declared return type and returns it with `impl Trait` erased to `_` (for the
/// fake return edge) and its span. Whether it really is `Result<T, E>` with
/// `E: From<LockError>` is left to the type checker (`LockedResult`), so aliases such as
/// `io::Result<T>` or `AppResult<T>` work.
fn check_return_type(sig: &Signature) -> syn::Result<(Type, Span)> {
    const MUST: &str =
        "a `#[distributed_lock]` fn must return `Result<T, E>` with `E: From<LockError>`";
    match &sig.output {
        ReturnType::Default => Err(syn::Error::new(
            sig.paren_token.span.join(),
            format!("{MUST}, so the lock error can be returned; this fn returns `()`"),
        )),
        ReturnType::Type(_, ty) => match &**ty {
            Type::Path(_) => {
                let mut erased = (**ty).clone();
                ImplTraitEraser.visit_type_mut(&mut erased);
                Ok((erased, ty.span()))
            }
            other => Err(syn::Error::new_spanned(
                other,
                format!("{MUST}; found `{}`", other.to_token_stream()),
            )),
        },
    }
}

struct ImplTraitEraser;

impl VisitMut for ImplTraitEraser {
    fn visit_type_mut(&mut self, ty: &mut Type) {
        if let Type::ImplTrait(_) = ty {
            *ty = Type::Infer(syn::TypeInfer {
                underscore_token: Token![_](ty.span()),
            });
        } else {
            syn::visit_mut::visit_type_mut(self, ty);
        }
    }
}

/// How a call's lock names are formatted.
enum Names {
    /// One name: an expression of type `String`.
    One(TokenStream),
    /// A name per element of a collection (a template with `[]`).
    Each(EachName),
}

/// A template over a collection: `"stock:<cart.items[].sku>"`.
struct EachName {
    /// The template as written.
    template: LitStr,
    /// The expression of the collection: `cart.items`.
    collection: TokenStream,
    /// The collection's path as written, for error messages: `cart.items`.
    path: String,
    /// The variable bound to each element.
    item: Ident,
    /// The expression that formats the name of the element `item`.
    name: TokenStream,
}

/// The expression(s) that format the lock name(s), with each placeholder checked against the
/// fn's parameters. Errors point at the name literal.
fn name_expr(name: &NameTemplate, sig: &Signature) -> syn::Result<Names> {
    let (has_self, names) = parameter_names(sig);
    let span = name.lit.span();
    let mut format = String::new();
    let mut plain = String::new();
    let mut values = Vec::new();
    let mut each = None;
    for part in &name.parts {
        match part {
            NamePart::Text(text) => {
                plain.push_str(text);
                format.push_str(&text.replace('{', "{{").replace('}', "}}"));
            }
            NamePart::Placeholder(placeholder) => {
                let root_tokens = root_tokens(placeholder, has_self, &names, sig, span)?;
                let mut fields = placeholder.fields.iter().map(|field| field.member(span));
                match (placeholder.collection, placeholder.collection_text()) {
                    (Some(n), Some(path)) => {
                        let path_fields = fields.by_ref().take(n);
                        let collection = quote_spanned!(span=> #root_tokens #(. #path_fields)*);
                        // Generated, so invisible to the user's code; located at the name.
                        let item = Ident::new("__lock_item", Span::mixed_site().located_at(span));
                        values.push(quote_spanned!(span=> #item #(. #fields)*));
                        each = Some((collection, path.to_string(), item));
                    }
                    _ => values.push(quote_spanned!(span=> #root_tokens #(. #fields)*)),
                }
                format.push_str("{}");
            }
        }
    }
    if values.is_empty() {
        let plain = LitStr::new(&plain, span);
        return Ok(Names::One(
            quote_spanned!(span=> ::std::string::String::from(#plain)),
        ));
    }
    let format = LitStr::new(&format, span);
    let formatted = quote_spanned!(span=> ::std::format!(#format #(, #values)*));
    Ok(match each {
        None => Names::One(formatted),
        Some((collection, path, item)) => Names::Each(EachName {
            template: name.lit.clone(),
            collection,
            path,
            item,
            name: formatted,
        }),
    })
}

/// The root of `placeholder` as an expression pointing at the name (`span`): `self`, or the
/// parameter it names.
fn root_tokens(
    placeholder: &Placeholder,
    has_self: bool,
    names: &BTreeMap<String, Ident>,
    sig: &Signature,
    span: Span,
) -> syn::Result<TokenStream> {
    let root = &placeholder.root;
    if root == "self" {
        if !has_self {
            return Err(syn::Error::new(
                span,
                format!(
                    "placeholder `<{}>` refers to `self`, but `{}` has no `self` parameter",
                    placeholder.text, sig.ident
                ),
            ));
        }
        Ok(Token![self](span).into_token_stream())
    } else if let Some(param) = names.get(root) {
        // The parameter's own identifier (raw if it was written `r#…`), pointing at the name.
        let mut param = param.clone();
        param.set_span(span);
        Ok(param.into_token_stream())
    } else {
        Err(unknown_placeholder(placeholder, names, has_self, sig, span))
    }
}

fn unknown_placeholder(
    placeholder: &Placeholder,
    names: &BTreeMap<String, Ident>,
    has_self: bool,
    sig: &Signature,
    span: Span,
) -> syn::Error {
    let mut known: Vec<String> = names.values().map(|n| format!("`{n}`")).collect();
    if has_self {
        known.insert(0, "`self`".to_string());
    }
    let known = if known.is_empty() {
        format!("`{}` has no named parameters", sig.ident)
    } else {
        format!("the parameters of `{}` are {}", sig.ident, known.join(", "))
    };
    syn::Error::new(
        span,
        format!(
            "unknown placeholder `<{}>` in the lock name: `{}` is not a parameter; {known}",
            placeholder.text, placeholder.root
        ),
    )
}

/// Whether the fn has a `self` parameter, and the identifiers its parameter patterns bind, by
/// name without `r#`.
fn parameter_names(sig: &Signature) -> (bool, BTreeMap<String, Ident>) {
    let mut has_self = false;
    let mut names = BTreeMap::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(_) => has_self = true,
            FnArg::Typed(pat_type) => bound_names(&pat_type.pat, &mut names),
        }
    }
    (has_self, names)
}

fn bound_names(pat: &Pat, names: &mut BTreeMap<String, Ident>) {
    match pat {
        Pat::Ident(p) => {
            names.insert(p.ident.unraw().to_string(), p.ident.clone());
            if let Some((_, sub)) = &p.subpat {
                bound_names(sub, names);
            }
        }
        Pat::Tuple(p) => p.elems.iter().for_each(|p| bound_names(p, names)),
        Pat::TupleStruct(p) => p.elems.iter().for_each(|p| bound_names(p, names)),
        Pat::Struct(p) => p.fields.iter().for_each(|f| bound_names(&f.pat, names)),
        Pat::Slice(p) => p.elems.iter().for_each(|p| bound_names(p, names)),
        Pat::Reference(p) => bound_names(&p.pat, names),
        Pat::Paren(p) => bound_names(&p.pat, names),
        Pat::Type(p) => bound_names(&p.pat, names),
        // Every alternative binds the same names.
        Pat::Or(p) => {
            if let Some(first) = p.cases.first() {
                bound_names(first, names);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signature() -> Signature {
        syn::parse_str(
            "async fn f(&self, a: u8, r#type: u8, (café, _a): (u8, u8), r: (u8,)) -> Result<(), E>",
        )
        .unwrap()
    }

    fn expand(template: &str) -> syn::Result<String> {
        let name = NameTemplate::parse(LitStr::new(template, Span::call_site()))?;
        let parse = |tokens: TokenStream| -> String {
            let expr: syn::Expr = syn::parse2(tokens.clone())
                .unwrap_or_else(|e| panic!("{template:?} expanded to {tokens} ({e})"));
            expr.to_token_stream().to_string()
        };
        Ok(match name_expr(&name, &signature())? {
            Names::One(tokens) => parse(tokens),
            // `for <item> in <collection>: <name>`
            Names::Each(each) => format!(
                "for {} in {}: {}",
                each.item,
                parse(each.collection),
                parse(each.name)
            ),
        })
    }

    #[test]
    fn collection_steps_expand_to_the_collection_and_a_name_per_item() {
        assert_eq!(
            expand("x:<self.type[].0.match>:<a>").unwrap(),
            "for __lock_item in self . r#type: :: std :: format ! (\"x:{}:{}\" , __lock_item . 0 \
             . r#match , a)"
        );
        assert_eq!(
            expand("<r.0[]>").unwrap(),
            "for __lock_item in r . 0: :: std :: format ! (\"{}\" , __lock_item)"
        );
        let error = expand("<b[].c>").unwrap_err().to_string();
        assert!(error.contains("`b` is not a parameter"), "{error}");
    }

    #[test]
    fn keywords_raw_and_unicode_names_expand_to_field_accesses() {
        for (template, expected) in [
            ("<a>", "a"),
            ("<type>", "r#type"),
            ("<r#type>", "r#type"),
            ("<r#a>", "a"),
            ("<café>", "café"),
            ("<_a>", "_a"),
            ("<r.0>", "r . 0"),
            ("<self.type.match>", "self . r#type . r#match"),
            ("<self.r#gen.größe.0.1>", "self . r#gen . größe . 0 . 1"),
            ("<self.union.raw>", "self . union . raw"),
        ] {
            let expr = expand(template).unwrap();
            assert!(
                expr.ends_with(&format!(", {expected})")),
                "{template:?} expanded to {expr}"
            );
        }
    }

    #[test]
    fn placeholders_naming_no_parameter_are_errors() {
        let error = expand("<b>").unwrap_err().to_string();
        assert!(
            error.contains("`b` is not a parameter")
                && error.contains("`self`, `_a`, `a`, `café`, `r`, `r#type`"),
            "{error}"
        );
        assert!(expand("<ａ>").is_err()); // a full-width letter: an identifier, but no parameter
    }

    #[test]
    fn every_accepted_template_expands_to_an_expression() {
        // Every template of up to 5 characters over this alphabet: parse errors and unknown
        // parameters are `Err`; anything accepted is an expression (no panic in between).
        let alphabet: Vec<char> = "<>.a_0r#[]".chars().collect();
        let mut accepted = 0;
        for len in 0..=5u32 {
            for n in 0..alphabet.len().pow(len) {
                let template: String = (0..len)
                    .map(|i| alphabet[n / alphabet.len().pow(i) % alphabet.len()])
                    .collect();
                if expand(&template).is_ok() {
                    accepted += 1;
                }
            }
        }
        // Some templates do name parameters (`<a>`, `<r.0>`, `<_a>`, `<r#a>`, …).
        assert!(accepted > 100, "only {accepted} templates expanded");
    }
}
