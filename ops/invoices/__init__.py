"""The invoice pipeline's tools: its sample data (``invoice_samples``) and ``keel invoices
submit`` (``invoice_submit``). They import the bundled examples; nothing in the product
imports them (docs/invoice-pipeline.md)."""
