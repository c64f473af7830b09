# generated from chapters/measuring.md — edit there

"""The measuring harness (the book's appendix, chapters/measuring*.md).

The compiler never imports this package. `python -m minductor.bench`,
`python -m minductor.models` and `python -m minductor.models --decode` run its suites.
"""
